"""Teams' acts that span apps: opening a team with its wallet (billing.onboarding), moving cash
between a person's own wallet and a team's, and reading its audit log. People, roles and
invitations are starverse.accounts.teams'; budgets are instances.budgets'."""

import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing.models import LedgerTransaction
from billing.services import transfer_post
from starverse.accounts.audit import audit_record
from starverse.accounts.models import AuditEvent, Tenant
from starverse.accounts.teams import acting_in
from starverse.core.errors import InvalidInput
from starverse.core.roles import require_manager, require_owner

TO_TEAM, FROM_TEAM = "to_team", "from_team"


def transfer_make(
    *,
    user: Any,
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
    user: Any,
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
