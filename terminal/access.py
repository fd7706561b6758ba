"""Who is at the other end of a terminal WebSocket: the page's origin, checked against the
console's own addresses (a page elsewhere must not open a shell with the user's cookie: cross-site
WebSocket hijacking), and the console's session, read from its cookie the way the console reads
it (the password it was made with, an active account, an operator's second factor)."""

from dataclasses import dataclass
from importlib import import_module
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib import auth
from django.http import HttpRequest
from django.http.cookie import parse_cookie
from django.http.request import validate_host
from django.utils import translation

from starverse.accounts import loginflow
from starverse.accounts.models import User


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def origin_allowed(origin: str | None) -> bool:
    """Whether a page at `origin` may open a terminal: the console's address (PUBLIC_BASE_URL),
    a CSRF_TRUSTED_ORIGINS entry (`https://*.example.com` included), or a host that
    ALLOWED_HOSTS names (its bare `*` excepted, which names no one in particular). A request
    without an Origin (no browser page sent it) is refused too: the cookie is its credential."""
    if not origin:
        return False
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    wanted = _origin(origin)
    trusted = [_origin(settings.PUBLIC_BASE_URL), *map(_origin, settings.CSRF_TRUSTED_ORIGINS)]
    for entry in trusted:
        if wanted == entry:
            return True
        scheme, _sep, host = entry.partition("://")
        wildcard = host.startswith("*.") and parts.scheme == scheme
        if wildcard and parts.netloc.lower().endswith(host[1:]):
            return True
    hosts = [host for host in settings.ALLOWED_HOSTS if host != "*"]
    return validate_host(parts.hostname, hosts)


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
