"""Failed log-ins and password-reset requests, counted in the shared cache per client address
and per account, so guessing passwords (console or admin) or flooding someone's inbox stops
after a few tries. Each count lives for one window from its first event."""

import hashlib
import math
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from starverse.accounts.models import normalize_email
from starverse.core.addresses import client_ip


def _window_s() -> int:
    return int(settings.LOGIN_FAILURE_WINDOW_MINUTES) * 60


def _key(kind: str, ident: str) -> str:
    digest = hashlib.sha256(ident.encode()).hexdigest()[:32]
    return f"lockout:{kind}:{digest}"


@dataclass(frozen=True)
class _Count:
    count: int
    minutes_left: int


def _read(kind: str, ident: str) -> _Count:
    key = _key(kind, ident)
    values = cache.get_many([key, key + ":t"])
    started = values.get(key + ":t")
    count = int(values.get(key) or 0)
    if started is None:
        return _Count(count, 0)
    left = started + _window_s() - time.time()
    return _Count(count, max(1, math.ceil(left / 60)))


def _bump(kind: str, ident: str) -> None:
    key = _key(kind, ident)
    window = _window_s()
    if cache.add(key + ":t", time.time(), timeout=window):
        cache.set(key, 0, timeout=window)
    cache.add(key, 0, timeout=window)
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=window)


def _clear(kind: str, ident: str) -> None:
    key = _key(kind, ident)
    cache.delete_many([key, key + ":t"])


def _minutes(n: int) -> str:
    return ngettext("%(n)d minute", "%(n)d minutes", n) % {"n": n}


def login_refusal(request: HttpRequest, email: str) -> str | None:
    """Why a log-in for this address must be refused now (without checking the password), or
    None."""
    account = _read("login-account", normalize_email(email))
    if account.count >= settings.LOGIN_FAILURES_PER_ACCOUNT:
        return _(
            "Too many failed attempts for this account; try again in %(time)s or reset your "
            "password."
        ) % {"time": _minutes(account.minutes_left)}
    address = _read("login-address", client_ip(request) or "")
    if address.count >= settings.LOGIN_FAILURES_PER_ADDRESS:
        return _("Too many failed log-in attempts from your network; try again in %(time)s.") % {
            "time": _minutes(address.minutes_left)
        }
    return None


def login_failed(request: HttpRequest, email: str) -> None:
    _bump("login-account", normalize_email(email))
    _bump("login-address", client_ip(request) or "")


def login_succeeded(email: str) -> None:
    """A right password clears the account's count (not the address's)."""
    _clear("login-account", normalize_email(email))


def password_reset_refusal(request: HttpRequest) -> str | None:
    """Counts a password-reset request from this address; why it must be refused, or None."""
    address = client_ip(request) or ""
    state = _read("reset-address", address)
    if state.count >= settings.PASSWORD_RESET_REQUESTS_PER_ADDRESS:
        return _("Too many password-reset requests from your network; try again in %(time)s.") % {
            "time": _minutes(state.minutes_left)
        }
    _bump("reset-address", address)
    return None


def password_reset_allowed_for(email: str) -> bool:
    """Counts a request for this e-mail; False once it has had its share of reset mails this
    window. The caller answers the same either way, so nobody learns whether it has an
    account."""
    email = normalize_email(email)
    if _read("reset-email", email).count >= settings.PASSWORD_RESET_REQUESTS_PER_EMAIL:
        return False
    _bump("reset-email", email)
    return True
