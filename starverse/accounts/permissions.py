"""API tokens carry scopes: reading needs `read`; changing instances, clusters, disks and the
NAS needs `instances`; top-ups and transfers `billing`; team management and tokens `admin`.
A view names what its writes need in `token_scope` (instances when it says nothing). Console
sessions are not tokens: they act with the person's role alone."""

from typing import Any

from django.utils.translation import gettext as _
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from starverse.accounts.models import ApiToken, Scope


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
