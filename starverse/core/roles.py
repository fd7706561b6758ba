"""Who may do what in a team: the one place the role rules live (API base class, services and
console views all call these). The acting user carries its
role in the tenant it acts for (User.act_for); in a personal account that is owner.

- owner: everything, and alone moves money out of the team and manages owners;
- admin: everything else, on anyone's objects (stop, terminate, delete), members, invitations,
  budgets and the audit log;
- member: orders and manages their own objects, sees the team's;
- billing: reads, tops up and transfers money in; orders nothing."""

from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext as _

from starverse.core.errors import Forbidden

if TYPE_CHECKING:  # the core names the user model only for the type checker (import contracts)
    from django.contrib.auth.models import AnonymousUser

    from starverse.accounts.models import User

# The values of starverse.accounts.models.Role (the core imports no app).
OWNER, ADMIN, MEMBER, BILLING = "owner", "admin", "member", "billing"
MANAGERS = (OWNER, ADMIN)
ORDERERS = (OWNER, ADMIN, MEMBER)
PAYERS = (OWNER, ADMIN, BILLING)


def role_of(user: "User | AnonymousUser") -> str:
    return str(getattr(user, "acting_role", OWNER))


def is_manager(user: "User | AnonymousUser") -> bool:
    return role_of(user) in MANAGERS


def require_role(user: "User | AnonymousUser", roles: tuple[str, ...], doing: str) -> None:
    """Refuse (403 `role_forbidden`) unless the user's role in the acting tenant is one of
    `roles`; `doing` names the act for the message."""
    role = role_of(user)
    if role not in roles:
        raise Forbidden(
            _("Your role in this team (%(role)s) does not allow %(doing)s.")
            % {"role": role, "doing": doing},
            code="role_forbidden",
        )


def require_orderer(user: "User | AnonymousUser") -> None:
    require_role(user, ORDERERS, _("ordering or changing resources"))


def require_payer(user: "User | AnonymousUser") -> None:
    require_role(user, PAYERS, _("topping up"))


def require_manager(user: "User | AnonymousUser") -> None:
    require_role(user, MANAGERS, _("managing the team"))


def require_owner(user: "User | AnonymousUser", doing: str) -> None:
    require_role(user, (OWNER,), doing)


def may_use(role: str | None, user_id: str, created_by_id: str | None) -> bool:
    """Whether a person with `role` in an object's tenant (None: not a member) may use it —
    reach its ports through the gateway, open its terminal, log in over SSH, make share links
    and keys for it: in their own account everything (they are its owner); in a team, owners
    and admins everything of the team, a member what they ordered, the billing role nothing."""
    if role in MANAGERS:
        return True
    return role == MEMBER and created_by_id == user_id


def require_own_or_manager(user: "User | AnonymousUser", obj: Any) -> None:
    """A member changes (stops, terminates, deletes, attaches …) only what they ordered; owners
    and admins anything of the team. The object is the team's, so the member can see it: the
    refusal is a 403 that says why, not a 404."""
    require_orderer(user)
    if is_manager(user) or getattr(obj, "created_by_id", None) == user.pk:
        return
    raise Forbidden(
        _(
            "This was ordered by another member of the team; only they, an owner or an admin "
            "may change it."
        ),
        code="not_yours",
    )
