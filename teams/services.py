"""Teams' acts that span apps: opening a team with its wallet (billing.onboarding), changing
and removing memberships with the credentials that go with them, moving cash between a
person's own wallet and a team's, and reading its audit log. Roles and invitations are
starverse.accounts.teams'; budgets are instances.budgets'."""

import logging
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing.models import LedgerTransaction
from billing.services import transfer_post
from endpoints.services import keys_revoke_unusable
from instances.gateway import shares_revoke_unusable
from instances.selectors import instances_live_of
from starverse.accounts.access import access_changed
from starverse.accounts.audit import audit_record
from starverse.accounts.models import ApiToken, AuditEvent, Membership, Role, Tenant, User
from starverse.accounts.teams import acting_in
from starverse.accounts.token_cache import token_cache_forget
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, InvalidInput, NotFound
from starverse.core.roles import ORDERERS, require_manager, require_owner

logger = logging.getLogger(__name__)
# Renders the access Secrets of the instances a person ordered again (the instances app's task).
ACCESS_REFRESH_TASK = "instances.tasks.refresh_access"


@dataclass(frozen=True)
class Revoked:
    """What a removal or a demotion took from the person in the team, shown to whoever did it
    and kept in the team's audit log: API tokens of the team, share links and endpoint keys
    they made for what they may no longer use, and the running instances they ordered whose
    SSH access no longer takes their keys."""

    tokens: int = 0
    share_links: int = 0
    endpoint_keys: int = 0
    instances_rekeyed: int = 0


def _access_take(team: Tenant, user_id: str, role: str | None, tokens: int = 0) -> Revoked:
    """Take from the person what `role` (None: no longer a member) does not allow, in the
    caller's transaction: their links and keys at once, their keys out of the access Secrets of
    the instances they ordered after commit (the Secrets are rendered from current members
    only), and their open terminals are told to check again."""
    shares = shares_revoke_unusable(tenant_id=team.pk, user_id=user_id, role=role)
    keys = keys_revoke_unusable(tenant_id=team.pk, user_id=user_id, role=role)
    rekeyed = 0
    if role not in ORDERERS:
        rekeyed = instances_live_of(tenant_id=team.pk, created_by_id=user_id)
        if rekeyed:
            personal = User.objects.values_list("tenant_id", flat=True).get(pk=user_id)
            enqueue_on_commit(ACCESS_REFRESH_TASK, personal)
    access_changed(user_id)
    return Revoked(tokens=tokens, share_links=shares, endpoint_keys=keys, instances_rekeyed=rekeyed)


def membership_role_set(
    *, actor: User, team: Tenant, user_id: str, role: str, ip: str | None = None
) -> tuple[Membership, Revoked]:
    """Change a member's role (owner/admin). Only an owner makes or unmakes owners; the last
    owner stays one (409 `last_owner`). What the new role no longer allows goes in the same
    transaction (_access_take)."""
    acting = acting_in(actor, team)
    require_manager(acting)
    if role not in Role.values:
        raise InvalidInput(_("role: choose owner, admin, member or billing."), code="invalid_role")
    with transaction.atomic():
        # the team's memberships locked in one order: two demotions at once cannot both pass
        members = list(Membership.objects.select_for_update().filter(tenant=team).order_by("pk"))
        membership = next((m for m in members if m.user_id == user_id), None)
        if membership is None:
            raise NotFound(_("No such member."))
        if Role.OWNER in (role, membership.role):
            require_owner(acting, _("making or unmaking owners"))
        owners = sum(1 for m in members if m.role == Role.OWNER)
        if membership.role == Role.OWNER and role != Role.OWNER and owners == 1:
            raise Conflict(
                _("A team needs an owner: make another member owner first."), code="last_owner"
            )
        before = membership.role
        membership.role = role
        membership.save(update_fields=["role"])
        token_cache_forget()  # a team token's role is kept with it
        revoked = _access_take(team, user_id, role)
        audit_record(
            tenant_id=team.pk,
            actor=actor,
            action="member.role_changed",
            object_type="user",
            object_id=user_id,
            data={"from": before, "to": role, "revoked": asdict(revoked)},
            ip=ip,
        )
    return membership, revoked


def membership_remove(*, actor: User, team: Tenant, user_id: str, ip: str | None = None) -> Revoked:
    """Remove a member (owners and admins; anyone may leave), and in the same transaction what
    they held in the team: its API tokens, the share links and endpoint keys they made there,
    and their keys in the access Secrets of the team's instances they ordered (_access_take).
    Their console sessions stop acting for the team at their next request; the last owner
    cannot be removed (409 `last_owner`)."""
    acting = acting_in(actor, team)
    if user_id != actor.pk:
        require_manager(acting)
    with transaction.atomic():
        members = list(Membership.objects.select_for_update().filter(tenant=team).order_by("pk"))
        membership = next((m for m in members if m.user_id == user_id), None)
        if membership is None:
            raise NotFound(_("No such member."))
        if membership.role == Role.OWNER and user_id != actor.pk:
            require_owner(acting, _("removing an owner"))
        if membership.role == Role.OWNER and sum(m.role == Role.OWNER for m in members) == 1:
            raise Conflict(
                _("A team needs an owner: make another member owner before removing this one."),
                code="last_owner",
            )
        membership.delete()
        tokens = ApiToken.objects.filter(
            user_id=user_id, team=team, revoked_at__isnull=True
        ).update(revoked_at=timezone.now())
        token_cache_forget()
        revoked = _access_take(team, user_id, None, tokens=tokens)
        audit_record(
            tenant_id=team.pk,
            actor=actor,
            action="member.removed",
            object_type="user",
            object_id=user_id,
            data={"role": membership.role, "tokens_revoked": tokens, "revoked": asdict(revoked)},
            ip=ip,
        )
    logger.info("team.member_removed team=%s user=%s revoked=%s", team.pk, user_id, revoked)
    return revoked


TO_TEAM, FROM_TEAM = "to_team", "from_team"


def transfer_make(
    *,
    user: User,
    team: Tenant,
    amount_fen: int,
    direction: str,
    idempotency_key: str = "",
    ip: str | None = None,
) -> tuple[LedgerTransaction, LedgerTransaction]:
    """Move cash between the person's own wallet and the team's: into the team any member may
    (it is their own money), out of it only an owner. The same Idempotency-Key moves it once;
    trial credit never moves. Audited in the team's log."""
    acting = acting_in(user, team)
    if direction not in (TO_TEAM, FROM_TEAM):
        raise InvalidInput(_("direction: to_team or from_team."), code="invalid_direction")
    if direction == FROM_TEAM:
        require_owner(acting, _("moving money out of the team"))
    source, target = (user.personal_tenant_id, team.pk)
    if direction == FROM_TEAM:
        source, target = target, source
    key = f"{team.pk}:{user.pk}:{idempotency_key or uuid.uuid4()}"
    started = timezone.now()
    with transaction.atomic():
        out, into = transfer_post(
            from_tenant_id=source,
            to_tenant_id=target,
            amount_fen=amount_fen,
            key=key,
            actor=user,
            description=gettext_noop("Transfer between wallets"),
        )
        if into.created_at >= started:  # a replay returns the first rows and is not logged again
            audit_record(
                tenant_id=team.pk,
                actor=user,
                action="transfer",
                object_type="ledgertransaction",
                object_id=into.pk,
                data={"amount_fen": amount_fen, "direction": direction},
                ip=ip,
            )
    return out, into


def audit_events(
    *,
    user: User,
    team: Tenant,
    since: datetime | None = None,
    until: datetime | None = None,
    actor: str = "",
    action: str = "",
) -> QuerySet[AuditEvent]:
    """The team's audit log, newest first, for its owners and admins."""
    require_manager(acting_in(user, team))
    events = AuditEvent.objects.filter(tenant=team).select_related("actor")
    if since is not None:
        events = events.filter(at__gte=since)
    if until is not None:
        events = events.filter(at__lt=until)
    if actor:
        events = events.filter(actor_id=actor)
    if action:
        events = events.filter(action=action)
    return events.order_by("-at", "-id")
