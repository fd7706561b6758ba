"""REQUIRE_2FA_FOR_STAFF for every page: an operator's session that has not passed the second
factor reaches only the Security page (to set up an authenticator app), logging out and the
language switch. Such a session is no credential for the API either (a bearer token still
is)."""

from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.models import AnonymousUser
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext as _

from starverse.accounts import loginflow
from starverse.accounts.models import Membership
from starverse.accounts.selectors import two_factor_enabled

ENROLMENT_PATHS = (
    "accounts:security",
    "accounts:security_enrol",
    "accounts:security_confirm",
    "accounts:logout",
    "set_language",
)


class StaffTwoFactorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if loginflow.session_allowed(request):
            return self.get_response(request)
        if request.path_info.startswith("/api/"):
            request.user = AnonymousUser()
            return self.get_response(request)
        if two_factor_enabled(request.user):  # type: ignore[arg-type]
            # signed in without the second step (a session older than it, or another way in):
            # it ends, and the log-in asks for the code
            logout(request)
            return redirect_to_login(request.get_full_path())
        if request.path_info in {reverse(name) for name in ENROLMENT_PATHS}:
            return self.get_response(request)
        messages.warning(
            request,
            _(
                "Operators must turn on two-factor authentication before using the console or "
                "the admin. Set up an authenticator app below."
            ),
        )
        return redirect("accounts:security")


ACTING_TEAM_KEY = "acting_team"


class ActingTenantMiddleware:
    """The console's team switch: a session that chose a team acts for it (User.act_for) on
    every request, checked against the membership each time, so a removed member is back in
    their own account at their next click and never sees the team's data."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        team_id = request.session.get(ACTING_TEAM_KEY) if hasattr(request, "session") else None
        if team_id:
            user = request.user
            role = (
                Membership.objects.filter(tenant_id=team_id, user_id=user.pk)
                .values_list("role", flat=True)
                .first()
                if user.is_authenticated
                else None
            )
            if role is None:
                del request.session[ACTING_TEAM_KEY]
            else:
                user.act_for(team_id, role)  # type: ignore[union-attr]
        return self.get_response(request)
