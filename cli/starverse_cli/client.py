"""The REST API over urllib: bearer token, JSON both ways, the API's error shape, retries that
are safe, and list pagination.

Retries: a 429 with `Retry-After` (the throttle: nothing was done) is retried for any call, up
to MAX_ATTEMPTS and waiting at most MAX_RETRY_AFTER_S each time; a 429 without it (an account
limit such as `queue_limit`) is an answer, not a wait. A connection error or a timeout is
retried only for calls that are safe to repeat: reads, and creates that carry an
Idempotency-Key the server honours (an order answered twice is one order).

The token goes to the API's own origin only: a redirect to another scheme, host or port is
followed without the Authorization header (urllib would copy it), and a plain http:// API
address off this machine is warned about (plain_http_warning)."""

from __future__ import annotations

import ipaddress
import json
import locale
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.client import HTTPMessage, IncompleteRead
from typing import IO, Any

from starverse_cli import __version__
from starverse_cli.config import API_PREFIX

MAX_ATTEMPTS = 5
MAX_RETRY_AFTER_S = 60.0
TIMEOUT_S = 30.0
STREAM_CHUNK = 64 * 1024
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
STREAM_ACCEPT = "text/plain, application/json"


class ApiError(Exception):
    """An error answer of the API: its HTTP status, `code` and `detail` (and field errors)."""

    def __init__(
        self,
        status: int,
        detail: str,
        code: str = "",
        errors: dict[str, Any] | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(detail)
        self.status, self.detail, self.code = status, detail, code
        self.errors = errors or {}
        self.body = body


class NetworkError(Exception):
    """The server could not be reached, or did not answer in time."""


def accept_language(environ: dict[str, str] | None = None) -> str:
    """The console's language for the user's locale: API messages come back in Chinese for a
    zh_* locale, in English otherwise."""
    env = os.environ if environ is None else environ
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name)
        if value:
            break
    else:
        value = (locale.getlocale()[0] or "") if environ is None else ""
    return "zh-hans, en;q=0.5" if value.lower().startswith("zh") else "en"


DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    """A URL's scheme, host and port (the scheme's default when none is written)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # not a number: no origin matches it
        port = -1
    return scheme, (parts.hostname or "").lower(), port or DEFAULT_PORTS.get(scheme)


def plain_http_warning(base_url: str) -> str | None:
    """The warning for an API address that sends the token and passwords in clear text over a
    network: http:// to a host other than this machine's loopback (127.0.0.0/8, ::1,
    localhost); None for https:// and for loopback."""
    scheme, host, _port = origin(base_url)
    if scheme != "http" or host == "localhost" or host.endswith(".localhost"):
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass  # a name: only localhost is known to be this machine
    return (
        f"warning: {base_url} is plain http://: the API token and passwords cross the network "
        "unencrypted; use the server's https:// address"
    )


class SameOriginAuthorization(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, less the Authorization header when the redirect leaves the
    request's origin (scheme, host or port): the token is for the API server only."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        follow = super().redirect_request(req, fp, code, msg, headers, newurl)
        if follow is not None and origin(follow.full_url) != origin(req.full_url):
            follow.remove_header("Authorization")
        return follow


OPENER = urllib.request.build_opener(SameOriginAuthorization)


class Client:
    """One API server and token. `sleep` is injectable so tests of the retry rules run fast."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout: float = TIMEOUT_S,
        sleep: Callable[[float], None] | None = None,
        opener: Callable[..., Any] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.sleep = sleep or time.sleep
        self.opener = opener or OPENER.open
        self.language = accept_language()

    def url(self, path: str, query: dict[str, Any] | None = None) -> str:
        if path.startswith(("http://", "https://")):
            url = path
        else:
            url = f"{self.base_url}{API_PREFIX}/{path.lstrip('/')}"
        if query:
            pairs = {key: value for key, value in query.items() if value is not None}
            if pairs:
                url += ("&" if "?" in url else "?") + urllib.parse.urlencode(pairs)
        return url

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
        repeatable: bool | None = None,
        content: tuple[bytes, str] | None = None,
    ) -> Any:
        """The decoded JSON answer (None for 204), or ApiError / NetworkError. `repeatable`:
        whether a network error may be retried (default: a read, or a call with an
        Idempotency-Key). `content`: a body sent as it is, with its media type, instead of
        JSON (a SkyPilot task as text/yaml)."""
        url = self.url(path, query)
        sent = self._headers("application/json", headers, auth)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        if content is not None:
            data, sent["Content-Type"] = content
        if repeatable is None:
            repeatable = method in SAFE_METHODS or "Idempotency-Key" in sent
        attempt = 0
        while True:
            attempt += 1
            req = urllib.request.Request(url, data=data, headers=sent, method=method)  # noqa: S310
            try:
                with self.opener(req, timeout=self.timeout) as answer:
                    raw = answer.read()
                    return json.loads(raw) if raw else None
            except urllib.error.HTTPError as error:
                wait = _retry_after(error)
                if error.code == 429 and wait is not None and attempt < MAX_ATTEMPTS:
                    self.sleep(min(wait, MAX_RETRY_AFTER_S))
                    continue
                raise _api_error(error) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                if repeatable and attempt < MAX_ATTEMPTS:
                    self.sleep(min(2.0 ** (attempt - 1), 10.0))
                    continue
                reason = getattr(error, "reason", error)
                raise NetworkError(f"cannot reach {self.base_url}: {reason}") from None

    def _headers(self, accept: str, extra: dict[str, str] | None, auth: bool) -> dict[str, str]:
        sent = {
            "Accept": accept,
            "Accept-Language": self.language,
            "User-Agent": f"starverse-cli/{__version__}",
            **(extra or {}),
        }
        if auth and self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        return sent

    def stream(
        self, path: str, query: dict[str, Any] | None = None, *, timeout: float | None = TIMEOUT_S
    ) -> Iterator[bytes]:
        """A text answer's bytes as they arrive: a followed log comes chunk by chunk until the
        server ends it (`timeout` None: a quiet container may say nothing for minutes). Not
        retried, as a stream broken halfway cannot be resumed where it broke."""
        url = self.url(path, query)
        # JSON is named too: an error answer is JSON, and a server whose negotiation renders
        # JSON only (the logs route before it learnt text/plain) refuses text/plain alone
        sent = self._headers(STREAM_ACCEPT, None, True)
        req = urllib.request.Request(url, headers=sent, method="GET")  # noqa: S310
        try:
            answer = self.opener(req, timeout=timeout)
        except urllib.error.HTTPError as error:
            raise _api_error(error) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            raise NetworkError(f"cannot reach {self.base_url}: {reason}") from None
        with answer:
            try:
                while chunk := answer.read1(STREAM_CHUNK):
                    yield chunk
            except (TimeoutError, ConnectionError, IncompleteRead) as error:
                raise NetworkError(f"the stream from {self.base_url} broke: {error}") from None

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query or None)

    def post(self, path: str, body: Any = None, **options: Any) -> Any:
        return self.request("POST", path, body={} if body is None else body, **options)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body=body)

    def delete(self, path: str, **query: Any) -> Any:
        return self.request("DELETE", path, query=query or None)

    def paginate(self, path: str, **query: Any) -> Iterator[dict[str, Any]]:
        """Every row of a list, page after page (`next`), or a plain list answer as it is."""
        page: Any = self.request("GET", path, query=query or None)
        while True:
            if isinstance(page, list):
                yield from page
                return
            yield from page.get("results") or []
            following = page.get("next")
            if not following:
                return
            page = self.request("GET", following)

    def list_all(self, path: str, **query: Any) -> list[dict[str, Any]]:
        return list(self.paginate(path, **query))


def _retry_after(error: urllib.error.HTTPError) -> float | None:
    value = error.headers.get("Retry-After") if error.headers else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: not sent by this API; treat as no hint


def _api_error(error: urllib.error.HTTPError) -> ApiError:
    try:
        raw = error.read()
    except OSError:
        raw = b""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    if isinstance(body, dict):
        detail = str(body.get("detail") or error.reason or "")
        errors = body.get("errors") if isinstance(body.get("errors"), dict) else None
        return ApiError(error.code, detail, str(body.get("code") or ""), errors, body)
    return ApiError(error.code, f"HTTP {error.code} {error.reason}", "", None, None)
