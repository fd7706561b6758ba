"""What every console form handler does: call a service, then say on the next page what
happened or, in the service's own words, why not."""

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme

from starverse.core.errors import ServiceError
from starverse.core.roles import require_own_or_manager

if TYPE_CHECKING:  # the core names the user model only for the type checker (import contracts)
    from starverse.accounts.models import User


def form_token() -> str:
    """A new order form's token: sent back with the form as its order's Idempotency-Key (under
    compute.admission.ORDER_KEY_PREFIX), so a form submitted twice orders once."""
    return secrets.token_urlsafe(24)


def page_user(request: HttpRequest) -> "User":
    """The signed-in user of a console or admin page, typed as the project's User. Console pages
    that ask are behind login_required and admin pages behind the admin site's staff check, so
    an anonymous visitor was already sent away; one that gets here anyway is refused."""
    user = request.user
    if not user.is_authenticated:
        raise PermissionDenied
    return user


def run_service(request: HttpRequest, action: Callable[[], Any], done: str) -> bool:
    """Run `action`; flash `done` on success or the service's message on refusal. Returns
    whether it succeeded."""
    try:
        action()
    except ServiceError as error:
        messages.error(request, error.message)
        return False
    messages.success(request, done)
    return True


def run_change(request: HttpRequest, obj: Any, action: Callable[[], Any], done: str) -> bool:
    """run_service for a change to a team's object: only who ordered it, an owner or an admin
    may (starverse.core.roles), the refusal flashed like any other."""

    def checked() -> Any:
        require_own_or_manager(request.user, obj)
        return action()

    return run_service(request, checked, done)


def redirect_back(request: HttpRequest, fallback: str) -> HttpResponse:
    """Back to where a form was posted from (its `next`, when it is this site's), else to
    `fallback`: an action taken from a list returns to the list."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(target)
    return redirect(fallback)
