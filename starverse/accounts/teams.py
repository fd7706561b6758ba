"""Teams' people: roles, invitations by e-mailed link, and who may act for which tenant and use
which of its objects. A team is a Tenant of kind team (its wallet is opened by
billing.onboarding.team_create); a personal tenant has no membership rows, its person is its
owner. Changing or removing a membership takes credentials of other apps away with it, so
that lives in teams.services. Every act here is written to the team's audit log."""

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core import signing
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from starverse.accounts.audit import audit_record
from starverse.accounts.models import (
    ApiToken,
    Invitation,
    Membership,
    Role,
    Tenant,
    TenantKind,
    User,
    all_scopes,
    normalize_email,
)
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from starverse.core.links import public_url
from starverse.core.roles import may_use, require_manager, require_owner

logger = logging.getLogger(__name__)
INVITATION_DAYS = 7
INVITATION_SALT = "starverse.accounts.team-invitation"
INVITATION_MAIL_TASK = "starverse.accounts.tasks.send_team_invitation"
MAX_TEAM_NAME = 200


class _Signer(signing.TimestampSigner):
    def timestamp(self) -> str:
        return signing.b62_encode(int(timezone.now().timestamp()))


def role_in(user: User, tenant_id: str) -> str | None:
    """The user's role in a tenant: owner of their own, their membership's in a team, or None."""
    if tenant_id == user.personal_tenant_id:
        return Role.OWNER
    return membership_role(tenant_id, str(user.pk))


def membership_role(tenant_id: str, user_id: str) -> str | None:
    """The person's membership's role in a team, or None (one query, by ids)."""
    return (
        Membership.objects.filter(tenant_id=tenant_id, user_id=user_id)
        .values_list("role", flat=True)
        .first()
    )


def usable_by(user: User, obj: Any) -> bool:
    """Whether the person may use `obj` (an instance, an endpoint: anything with tenant_id and
    created_by_id) by their role in its tenant now (starverse.core.roles.may_use): the gateway,
    the terminal, SSH access and share links all ask this."""
    return may_use(role_in(user, obj.tenant_id), user.pk, obj.created_by_id)


def team_of(user: User, team_id: str) -> Tenant:
    """A team the user belongs to; any other (or none) is a 404, as for every tenant object."""
    team = Tenant.objects.filter(
        pk=team_id, kind=TenantKind.TEAM, memberships__user_id=user.pk
    ).first()
    if team is None:
        raise NotFound(_("No such team."))
    return team


def team_name_clean(name: str) -> str:
    name = name.strip()
    if not name:
        raise InvalidInput(_("name: give the team a name."), code="invalid_name")
    return name[:MAX_TEAM_NAME]


def team_tenant_create(*, user: User, name: str) -> Tenant:
    """The team's tenant with its creator as owner (the caller opens its wallet in the same
    transaction)."""
    team = Tenant.objects.create(name=team_name_clean(name), kind=TenantKind.TEAM)
    Membership.objects.create(tenant=team, user_id=user.pk, role=Role.OWNER)
    audit_record(tenant_id=team.pk, actor=user, action="team.created", obj=team)
    return team


def acting_in(user: User, team: Tenant) -> Any:
    """The user with their role in `team`: team management acts for the team in the URL, so
    the role is read from there, not from the tenant the request acts for."""
    role = role_in(user, team.pk)
    if role is None:
        raise NotFound(_("No such team."))
    probe = User(pk=user.pk, tenant_id=team.pk)
    probe.acting_role = role
    return probe


def invitation_token(invitation: Invitation) -> str:
    return _Signer(salt=INVITATION_SALT).sign_object([invitation.pk])


def invitation_link(invitation: Invitation) -> str:
    path = reverse("teams:invitation_accept", args=[invitation_token(invitation)])
    return public_url(path)


def invitation_create(
    *,
    actor: Any,
    team: Tenant,
    email: str,
    role: str,
    ip: str | None = None,
    language: str | None = None,
) -> Invitation:
    """Invite an address (owners and admins; only an owner invites an owner). An address that
    is already a member is a 409 `already_member`. The link is mailed after commit."""
    acting = acting_in(actor, team)
    require_manager(acting)
    if role not in Role.values:
        raise InvalidInput(_("role: choose owner, admin, member or billing."), code="invalid_role")
    if role == Role.OWNER:
        require_owner(acting, _("inviting an owner"))
    email = normalize_email(email)
    if "@" not in email or len(email) > 254:
        raise InvalidInput(_("email: enter a valid e-mail address."), code="invalid_email")
    if Membership.objects.filter(tenant=team, user__email=email).exists():
        raise Conflict(
            _("%(email)s is already a member of this team.") % {"email": email},
            code="already_member",
        )
    with transaction.atomic():
        invitation = Invitation.objects.create(
            tenant=team,
            email=email,
            role=role,
            invited_by_id=actor.pk,
            expires_at=timezone.now() + timedelta(days=INVITATION_DAYS),
        )
        audit_record(
            tenant_id=team.pk,
            actor=actor,
            action="invitation.created",
            obj=invitation,
            data={"email": email, "role": role},
            ip=ip,
        )
        language = language or translation.get_language() or settings.LANGUAGE_CODE
        enqueue_on_commit(INVITATION_MAIL_TASK, invitation.pk, language)
    return invitation


def invitation_revoke(*, actor: Any, invitation: Invitation, ip: str | None = None) -> None:
    require_manager(acting_in(actor, invitation.tenant))
    if invitation.accepted_at is not None:
        raise Conflict(_("This invitation was already accepted."), code="already_accepted")
    with transaction.atomic():
        Invitation.objects.filter(pk=invitation.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        audit_record(
            tenant_id=invitation.tenant_id,
            actor=actor,
            action="invitation.revoked",
            obj=invitation,
            data={"email": invitation.email},
            ip=ip,
        )


def invitation_for_token(token: str) -> Invitation:
    """The invitation a link names while it can be accepted, else a 400 saying why."""
    try:
        (invitation_id,) = _Signer(salt=INVITATION_SALT).unsign_object(
            token, max_age=timedelta(days=INVITATION_DAYS)
        )
    except signing.SignatureExpired:
        raise InvalidInput(
            _("This invitation has expired; ask the team for a new one."), code="link_expired"
        ) from None
    except (signing.BadSignature, ValueError, TypeError):
        raise InvalidInput(_("This invitation link is not valid."), code="invalid_link") from None
    invitation = Invitation.objects.select_related("tenant").filter(pk=invitation_id).first()
    if invitation is None or invitation.revoked_at is not None:
        raise InvalidInput(_("This invitation was withdrawn."), code="invalid_link")
    if invitation.expires_at <= timezone.now():
        raise InvalidInput(
            _("This invitation has expired; ask the team for a new one."), code="link_expired"
        )
    return invitation


def invitation_accept(*, user: User, token: str, ip: str | None = None) -> Membership:
    """Join the team of an invitation, once, as the signed-in person it was sent to, whose
    address is verified (an account someone opened with an address they do not hold joins no
    team: 403 `email_unverified`; the console's page of the e-mailed link verifies it first,
    the link being proof of the mailbox)."""
    invitation = invitation_for_token(token)
    if normalize_email(user.email) != invitation.email:
        raise Forbidden(
            _("This invitation was sent to another e-mail address; sign in as %(email)s.")
            % {"email": invitation.email},
            code="wrong_account",
        )
    if user.email_verified_at is None:
        raise Forbidden(
            _(
                "Verify your e-mail address before joining a team: open the invitation link "
                "from the e-mail in the console, or the verification link we sent you."
            ),
            code="email_unverified",
        )
    try:
        with transaction.atomic():
            done = Invitation.objects.filter(
                pk=invitation.pk, accepted_at__isnull=True, revoked_at__isnull=True
            ).update(accepted_at=timezone.now(), accepted_by_id=user.pk)
            if not done:
                raise Conflict(_("This invitation was already used."), code="already_accepted")
            membership = Membership.objects.create(
                tenant_id=invitation.tenant_id, user_id=user.pk, role=invitation.role
            )
            audit_record(
                tenant_id=invitation.tenant_id,
                actor=user,
                action="invitation.accepted",
                obj=invitation,
                data={"email": invitation.email, "role": invitation.role},
                ip=ip,
            )
    except IntegrityError:
        raise Conflict(_("You are already a member of this team."), code="already_member") from None
    logger.info(
        "team.joined team=%s user=%s role=%s", invitation.tenant_id, user.pk, invitation.role
    )
    return membership


def mail_languages(*, first: str) -> list[str]:
    """Every console language, `first` (the sender's) ahead: a mail to someone whose language
    is not known is written in all of them."""
    codes = [code for code, _name in settings.LANGUAGES]
    first = translation.get_supported_language_variant(first)
    return [first, *(code for code in codes if code != first)]


def invitation_email_send(*, invitation_id: str, language: str) -> bool:
    """Mail the invitation in every console language, the inviter's (`language`) first: the
    invitee's is not known."""
    invitation = (
        Invitation.objects.select_related("tenant", "invited_by")
        .filter(pk=invitation_id, accepted_at__isnull=True, revoked_at__isnull=True)
        .first()
    )
    if invitation is None:
        return False
    context = {
        "team": invitation.tenant.name,
        "inviter": invitation.invited_by.email,
        "role": Role(invitation.role).label,  # lazy: read in each language
        "link": invitation_link(invitation),
        "days": INVITATION_DAYS,
    }
    subjects, bodies = [], []
    for each in mail_languages(first=language):
        with translation.override(each):
            subjects.append(render_to_string("teams/invitation_subject.txt", context).strip())
            bodies.append(render_to_string("teams/invitation_email.txt", context).strip())
    send_mail(" / ".join(subjects), "\n\n— — —\n\n".join(bodies) + "\n", None, [invitation.email])
    logger.info("team.invitation_sent invitation=%s team=%s", invitation.pk, invitation.tenant_id)
    return True


def _teams(user: User) -> QuerySet[Tenant]:
    """The teams the person is a member of."""
    return Tenant.objects.filter(kind=TenantKind.TEAM, memberships__user_id=user.pk)


def teams_of(user: User) -> list[tuple[str, str]]:
    """(id, name) of the person's teams, by name: the console's switch and token choices."""
    return list(_teams(user).order_by("name").values_list("id", "name"))


def team_for_token(user: User, team: str) -> str:
    """The id of the person's team named by `team`: its id, or its exact name (any case)
    among their teams; any other is a 404, as for every tenant object."""
    found = list(
        _teams(user).filter(Q(pk=team) | Q(name__iexact=team)).values_list("pk", flat=True)
    )
    if team in found:
        return team
    if len(found) > 1:
        raise InvalidInput(
            _("team: %(n)d of your teams are named %(name)s; give the team's id.")
            % {"n": len(found), "name": team},
            code="ambiguous_team",
        )
    if not found:
        raise NotFound(_("No such team."))
    return str(found[0])


def token_team_check(
    *,
    user: User,
    team_id: str | None,
    scopes: list[str],
    minted_by: ApiToken | None = None,
) -> tuple[str | None, list[str]]:
    """The team and scopes of a new token, checked: a team token only for a member of the
    team, and scopes of read, instances, billing and admin (all of them when none are named).
    A token made with a token (`minted_by`) is never broader than it: a team token makes
    tokens of its own team only (403 `wrong_team`), and the new scopes are among its own
    (403 `insufficient_scope`; left out, they are its own). A personal token acts for the
    person, so it may make a token for any of their teams."""
    team_id = team_for_token(user, team_id) if team_id else None
    if minted_by is not None and minted_by.team_id and team_id != minted_by.team_id:
        raise Forbidden(
            _("A token of a team can only make tokens of that team (%(team)s).")
            % {"team": minted_by.team_id},
            code="wrong_team",
        )
    if scopes:
        scopes = list(dict.fromkeys(scopes))
    else:
        scopes = list(minted_by.scopes) if minted_by is not None else all_scopes()
    unknown = [scope for scope in scopes if scope not in all_scopes()]
    if unknown:
        raise InvalidInput(
            _("scopes: unknown scope %(scope)s; use read, instances, billing or admin.")
            % {"scope": unknown[0]},
            code="invalid_scope",
        )
    if minted_by is not None:
        missing = [scope for scope in scopes if scope not in minted_by.scopes]
        if missing:
            raise Forbidden(
                _(
                    "This token lacks the %(scopes)s scope, so it cannot make a token with it "
                    "(its scopes: %(have)s)."
                )
                % {"scopes": ", ".join(missing), "have": ", ".join(minted_by.scopes) or "-"},
                code="insufficient_scope",
            )
    return team_id, scopes
