"""The console's log-in in two steps, kept in the session.

After the right password, an account with two-factor authentication is not signed in: the
session holds only whose second step is pending, for five minutes, bound to the password as
it was (a password reset meanwhile voids it). The right code then signs the session in with a
new session key and marks it as having passed the second factor. A session marked so is what
REQUIRE_2FA_FOR_STAFF asks of operators, in the console (the middleware) and in the admin (its
site class)."""

import time
from typing import Any

from django.conf import settings
from django.contrib.auth import login
from django.http import HttpRequest

from starverse.accounts import lockout
from starverse.accounts.models import User
from starverse.accounts.selectors import two_factor_required_for_login

PENDING_KEY = "_2fa_pending"
VERIFIED_KEY = "_2fa_verified"
PENDING_SECONDS = 5 * 60
DEFAULT_BACKEND = "django.contrib.auth.backends.ModelBackend"


def pending_start(request: HttpRequest, user: User, next_url: str) -> None:
    """The password was right; the code is still to come. Nothing is signed in."""
    request.session[PENDING_KEY] = {
        "user": str(user.pk),
        "until": time.time() + PENDING_SECONDS,
        "password": user.get_session_auth_hash(),
        "backend": getattr(user, "backend", DEFAULT_BACKEND),
        "next": next_url,
    }


def _pending(request: HttpRequest) -> dict[str, Any] | None:
    pending = request.session.get(PENDING_KEY)
    if not isinstance(pending, dict) or pending.get("until", 0) < time.time():
        return None
    return pending


def pending_user(request: HttpRequest) -> User | None:
    """Whose second step this session is at, while it is still open (five minutes, the same
    password, the account active); else None, and the step is forgotten."""
    pending = _pending(request)
    user = None
    if pending is not None:
        user = User.objects.filter(pk=pending["user"], is_active=True).first()
        if user is not None and user.get_session_auth_hash() != pending["password"]:
            user = None
    if user is None:
        request.session.pop(PENDING_KEY, None)
    return user


def pending_next(request: HttpRequest) -> str:
    pending = _pending(request)
    return str(pending["next"]) if pending else str(settings.LOGIN_REDIRECT_URL)


def complete(request: HttpRequest, user: User, *, second_factor: bool) -> None:
    """Sign the session in (Django's login gives it a new key) and clear the account's count
    of failed log-ins; `second_factor` marks it as having passed one."""
    pending = request.session.pop(PENDING_KEY, None) or {}
    backend = pending.get("backend") or getattr(user, "backend", DEFAULT_BACKEND)
    login(request, user, backend=backend)
    if second_factor:
        mark_verified(request, user)
    lockout.login_succeeded(user.email)


def mark_verified(request: HttpRequest, user: User) -> None:
    request.session[VERIFIED_KEY] = str(user.pk)


def is_verified(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_authenticated and request.session.get(VERIFIED_KEY) == str(user.pk))


def session_allowed(request: HttpRequest) -> bool:
    """False for an operator's session that has not passed the second factor while
    REQUIRE_2FA_FOR_STAFF is on; True for everything else."""
    user = request.user
    if not user.is_authenticated or not two_factor_required_for_login(user):
        return True
    return is_verified(request)
