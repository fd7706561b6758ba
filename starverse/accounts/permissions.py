"""API tokens carry scopes: reading needs `read`; changing instances, clusters, disks and the
NAS needs `instances`; top-ups and transfers `billing`; team management and tokens `admin`.
A view names what its writes need in `token_scope` (instances when it says nothing). A team's
token acts for the team only: routes keyed on the person rather than the tenant say so in
`person_keyed` and refuse it. Console sessions are not tokens: they act with the person's role
alone."""

from typing import Any

from django.utils.translation import gettext as _
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from starverse.accounts.models import ApiToken, Scope
from starverse.core.api.auth import person_keyed


def scope_needed(request: Request, view: Any) -> str:
    if request.method in SAFE_METHODS:
        return str(getattr(view, "token_read_scope", Scope.READ))
    return str(getattr(view, "token_scope", Scope.INSTANCES))


class TokenScope(BasePermission):
    code = "insufficient_scope"
    message = ""

    def has_permission(self, request: Request, view: Any) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken):
            return True
        needed = scope_needed(request, view)
        if needed in token.scopes:
            return True
        self.message = _(
            "This token lacks the %(scope)s scope; create a token with it (its scopes: %(have)s)."
        ) % {"scope": needed, "have": ", ".join(token.scopes) or "-"}
        return False


class PersonalRoute(BasePermission):
    """A team's token acts for the team, never for the person who made it: on a route keyed on
    the person (their SSH keys, which open their own instances as root; their settings and
    second factor; their own wallet's money; the teams they open or join) it is refused, 403
    `wrong_team`. A personal token or the console's session may."""

    code = "wrong_team"
    message = ""

    def has_permission(self, request: Request, view: Any) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken) or not token.team_id:
            return True
        if not person_keyed(view, request.method or ""):
            return True
        self.message = _(
            "A team's token acts for its team only; this acts on your own account (SSH keys, "
            "settings, your own money, your teams). Use a personal token or the console."
        )
        return False
