"""Who is at the other end of a terminal WebSocket: the page's origin, checked against the
console's own origin and an explicit list (a page elsewhere, a tenant's page on the gateway
above all, must not open a shell with the user's cookie: cross-site WebSocket hijacking), and
the console's session, read from its cookie the way the console reads it (the password it was
made with, an active account, an operator's second factor)."""

from dataclasses import dataclass
from importlib import import_module

from django.conf import settings
from django.contrib import auth
from django.http import HttpRequest
from django.http.cookie import parse_cookie
from django.utils import translation

from starverse.accounts import loginflow
from starverse.accounts.models import User
from starverse.core.sites import origin_of


def origin_allowed(origin: str | None) -> bool:
    """Whether a page at `origin` may open a terminal: exactly the console's own origin
    (PUBLIC_BASE_URL) or one TERMINAL_ALLOWED_ORIGINS names (the settings keep those off the
    gateway's domain), never by pattern. ALLOWED_HOSTS is no guide: it names the gateway's
    `.GATEWAY_DOMAIN`, whose pages are tenants' content. A request without an Origin (no
    browser page sent it) is refused too: the cookie is its credential."""
    wanted = origin_of(origin or "")
    if not wanted:
        return False
    return wanted in {origin_of(settings.PUBLIC_BASE_URL), *settings.TERMINAL_ALLOWED_ORIGINS}


@dataclass(frozen=True)
class Visitor:
    user: User | None
    language: str


def visitor(headers: dict[str, str]) -> Visitor:
    """The signed-in user of the console session the cookie names (None when there is none, it
    ended, or an operator's session lacks the second factor), and the language to answer in."""
    cookies = parse_cookie(headers.get("cookie", ""))
    request = HttpRequest()
    request.COOKIES = cookies
    request.META["HTTP_ACCEPT_LANGUAGE"] = headers.get("accept-language", "")
    language = translation.get_language_from_request(request)
    key = cookies.get(settings.SESSION_COOKIE_NAME)
    if not key:
        return Visitor(None, language)
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(key)
    user = auth.get_user(request)  # checks the session against the password it was made with
    if not isinstance(user, User) or not user.is_active:
        return Visitor(None, language)
    request.user = user
    if not loginflow.session_allowed(request):
        return Visitor(None, language)
    return Visitor(user, language)
