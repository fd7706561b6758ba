"""The API's per-user request limit (API_THROTTLE_RATE) in one Redis round trip.

DRF's UserRateThrottle keeps each user's request times as one pickled list in the cache: a
GET, then a SET of up to 600 timestamps, on every API request, and two requests at once can
both read the same list. On Redis the same sliding window lives in a sorted set that one Lua
script trims, counts and adds to atomically: one round trip, nothing pickled, no lost update.
Other caches (the development file cache) keep DRF's way. Same rule either way: a request is
let through when fewer than N requests were let through in the last period."""

import threading
import uuid
from typing import TYPE_CHECKING, Any

import redis
from django.core.cache import DEFAULT_CACHE_ALIAS, cache, caches
from django.core.cache.backends.redis import RedisCache
from rest_framework import throttling
from rest_framework.request import Request

from starverse.core.addresses import client_ip

if TYPE_CHECKING:  # rest_framework.views imports the throttle classes: no import at run time
    from rest_framework.views import APIView

# KEYS[1] the window; ARGV now, period (s), limit, a member unique to this request. Returns
# {1, count} when let through, {0, count, oldest time} when not.
WINDOW_SCRIPT = """
local key, now, period = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period)
local count = redis.call('ZCARD', key)
if count >= tonumber(ARGV[3]) then
  return {0, count, redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]}
end
redis.call('ZADD', key, now, ARGV[4])
redis.call('EXPIRE', key, math.ceil(period))
return {1, count + 1}
"""


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
        backend = caches[DEFAULT_CACHE_ALIAS] if self.cache is cache else self.cache
        if self.rate is None or not isinstance(backend, RedisCache):
            return super().allow_request(request, view)
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        self.now = self.timer()
        limit, period = self.parse_rate(self.rate)
        self.period = period or 0
        key = backend.make_key(f"{self.key}:window")
        client = _client(backend, key)
        allowed, *rest = _script(client)(
            keys=[key],
            args=[repr(self.now), self.period, limit, uuid.uuid4().hex],
            client=client,
        )
        if allowed:
            return True
        self.oldest = float(rest[1])
        return False

    def wait(self) -> float | None:
        if self.oldest is None:
            return super().wait()
        return max(0.0, self.period - (self.now - self.oldest))
