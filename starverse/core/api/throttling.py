"""The API's per-user request limit (API_THROTTLE_RATE) in one Redis round trip, which also
carries the credentials generation that makes a revoked API token fail at once everywhere.

DRF's UserRateThrottle keeps each user's request times as one pickled list in the cache: a
GET, then a SET of up to 600 timestamps, on every API request, and two requests at once can
both read the same list. On Redis the same sliding window lives in a sorted set that one Lua
script trims, counts and adds to atomically: one round trip, nothing pickled, no lost update.
Other caches (the development file cache) keep DRF's way. Same rule either way: a request is
let through when fewer than N requests were let through in the last period.

The credentials generation (CREDENTIALS_KEY) is a counter that credentials_changed() raises
whenever a token is revoked or a user or a team membership changes (after the change commits).
The script reads it in the same round trip; when it moved since the request's token was looked
up from a process's token cache, the token is looked up again before the view runs
(_check_credentials; starverse.accounts.token_cache), so a revoked token is refused by every
web process on its next request. Without Redis the generation is one more read of the cache."""

import logging
import threading
import uuid
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import redis
from django.core.cache import DEFAULT_CACHE_ALIAS, cache, caches
from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.redis import RedisCache
from rest_framework import throttling
from rest_framework.request import Request

from starverse.core.addresses import client_ip

if TYPE_CHECKING:  # rest_framework.views imports the throttle classes: no import at run time
    from rest_framework.views import APIView

logger = logging.getLogger(__name__)

CREDENTIALS_KEY = "api:credentials-generation"

# KEYS[1] the window, KEYS[2] the credentials generation; ARGV now, period (s), limit, a member
# unique to this request. Returns {1, generation, count} when let through, {0, generation,
# count, oldest time} when not.
WINDOW_SCRIPT = """
local key, now, period = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local generation = tonumber(redis.call('GET', KEYS[2]) or '0')
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period)
local count = redis.call('ZCARD', key)
if count >= tonumber(ARGV[3]) then
  return {0, generation, count, redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]}
end
redis.call('ZADD', key, now, ARGV[4])
redis.call('EXPIRE', key, math.ceil(period))
return {1, generation, count + 1}
"""


@runtime_checkable
class Revalidating(Protocol):
    """An authentication that can check a request's credentials again (the bearer token's)."""

    def revalidate(self, request: Request, generation: int) -> bool: ...


def _default_cache() -> BaseCache:
    return caches[DEFAULT_CACHE_ALIAS]


def credentials_changed() -> None:
    """Raise the credentials generation: every web process looks up the tokens it keeps again
    on its next API request. Called once the change has committed; if the cache cannot be
    reached the change still stands, and other processes see it within API_TOKEN_CACHE_S."""
    backend = _default_cache()
    try:
        backend.add(CREDENTIALS_KEY, 0, timeout=None)
        backend.incr(CREDENTIALS_KEY)
    except (redis.RedisError, OSError, ValueError) as error:
        logger.error("credentials.generation_not_raised error=%s", type(error).__name__)


def _check_credentials(request: Request, view: "APIView", generation: Any) -> None:
    """The request's credentials, checked against the generation just read: an authentication
    that can check again does (it raises AuthenticationFailed for a revoked token), and if it
    replaced the request's user, the view's permissions are checked again for that user."""
    authenticator = getattr(request, "successful_authenticator", None)
    if isinstance(authenticator, Revalidating) and authenticator.revalidate(
        request, int(generation or 0)
    ):
        view.check_permissions(request)


_SCRIPT: list[Any] = []


def _script(client: Any) -> Any:
    """The script, registered once per process: called by its SHA-1, sent again by redis-py
    only when the server does not know it (after a restart)."""
    if not _SCRIPT:
        _SCRIPT.append(client.register_script(WINDOW_SCRIPT))
    return _SCRIPT[0]


_HELD = threading.local()


def _client(backend: RedisCache, key: str) -> Any:
    """A Redis client of the backend's pool made once per thread (a cache backend is per thread
    too), holding one connection of its own: Django's cache makes a new client, with its table
    of ~170 reply parsers, on every call, and each call takes a connection from the pool and
    checks it. It writes to the first server whatever the key, so the first key's serves all."""
    held = getattr(_HELD, "client", None)
    if held is None or held[0] is not backend:
        pool = backend._cache.get_client(key, write=True).connection_pool
        held = (backend, redis.Redis(connection_pool=pool, single_connection_client=True))
        _HELD.client = held
    return held[1]


class ClientAddress:
    """A throttle that counts an anonymous request by the client's address as
    starverse.core.addresses reads it (NUM_PROXIES), like everything else that counts by it."""

    def get_ident(self, request: Request) -> str:
        return client_ip(request) or ""


class AnonRateThrottle(ClientAddress, throttling.AnonRateThrottle):
    """DRF's throttle of requests without a user, per client address."""


class UserRateThrottle(ClientAddress, throttling.UserRateThrottle):
    """DRF's per-user throttle, one atomic script call per request on Redis."""

    oldest: float | None = None  # when refused: the time of the oldest request in the window
    period: int = 0

    def allow_request(self, request: Request, view: "APIView") -> bool:
        # DRF's `cache` is Django's default-cache proxy: the backend behind it says which way
        backend = _default_cache() if self.cache is cache else self.cache
        if not isinstance(backend, RedisCache):
            allowed = super().allow_request(request, view)
            _check_credentials(request, view, backend.get(CREDENTIALS_KEY))
            return allowed
        credentials = backend.make_key(CREDENTIALS_KEY)
        client = _client(backend, credentials)
        self.key = self.get_cache_key(request, view) if self.rate is not None else None
        if self.rate is None or self.key is None:  # no limit: the generation alone
            _check_credentials(request, view, client.get(credentials))
            return True
        self.now = self.timer()
        limit, period = self.parse_rate(self.rate)
        self.period = period or 0
        key = backend.make_key(f"{self.key}:window")
        allowed, generation, *rest = _script(client)(
            keys=[key, credentials],
            args=[repr(self.now), self.period, limit, uuid.uuid4().hex],
            client=client,
        )
        _check_credentials(request, view, generation)
        if allowed:
            return True
        self.oldest = float(rest[1])
        return False

    def wait(self) -> float | None:
        if self.oldest is None:
            return super().wait()
        return max(0.0, self.period - (self.now - self.oldest))
