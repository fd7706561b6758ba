"""REDIS_URL through Redis Sentinel, for a Redis that fails over (docs/operator-guide.md
"Redis"): `redis+sentinel://[:password@]host:port[,host:port…]/<master name>[/<db>]`.

The cache (and the throttles, which use its pool) asks the sentinels for the current master
through redis-py's SentinelConnectionPool (SentinelPool below, as the cache's pool class); Celery
reaches it through kombu's own sentinel transport, whose URL and options celery_broker() writes.
The password is the Redis servers'; the sentinels themselves are reached without one (keep
their port closed to anything but the platform). A plain redis:// URL is used as it is.
"""

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured
from redis.sentinel import Sentinel, SentinelConnectionPool

SCHEME = "redis+sentinel"
DEFAULT_PORT = 26379
# how long a sentinel may take to answer which server is the master
SENTINEL_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class SentinelUrl:
    """A sentinel REDIS_URL, taken apart."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int
    password: str | None


def parse(url: str) -> SentinelUrl | None:
    """The parts of a sentinel URL; None for any other URL. A malformed one fails the start."""
    parts = urlsplit(url)
    if parts.scheme != SCHEME:
        return None
    hosts = parts.netloc.rsplit("@", 1)[-1]
    path = [p for p in parts.path.split("/") if p]
    sentinels: list[tuple[str, int]] = []
    for host in hosts.split(","):
        name, _, port = host.rpartition(":") if ":" in host else (host, "", "")
        if not name or (port and not port.isdigit()):
            sentinels = []
            break
        sentinels.append((name, int(port or DEFAULT_PORT)))
    if not sentinels or len(path) not in (1, 2) or (len(path) == 2 and not path[1].isdigit()):
        raise ImproperlyConfigured(
            f"REDIS_URL: a sentinel URL is {SCHEME}://[:password@]host:port[,host:port…]/"
            "<master name>[/<db>], e.g. redis+sentinel://:secret@redis-sentinel:26379/starverse/0"
        )
    password = unquote(parts.password) if parts.password else None
    return SentinelUrl(tuple(sentinels), path[0], int(path[1]) if len(path) == 2 else 0, password)


def celery_broker(url: str) -> tuple[str, dict[str, Any]]:
    """kombu's broker URL and transport options for REDIS_URL (a sentinel one: one
    `sentinel://` URL per sentinel and the master's name)."""
    parsed = parse(url)
    if parsed is None:
        return url, {}
    auth = f":{parsed.password}@" if parsed.password else ""
    urls = ";".join(f"sentinel://{auth}{h}:{p}/{parsed.db}" for h, p in parsed.sentinels)
    return urls, {"master_name": parsed.master, "sentinel_kwargs": {"socket_timeout": 2.0}}


def cache_location(url: str) -> tuple[list[str] | str, dict[str, Any]]:
    """Django's RedisCache LOCATION and OPTIONS for REDIS_URL. A sentinel URL goes as a
    one-item list: a string LOCATION is split at its commas into several servers."""
    if parse(url) is None:
        return url, {}
    return [url], {"pool_class": "starverse.core.redis_sentinel.SentinelPool"}


class SentinelPool(SentinelConnectionPool):
    """The connections of the master the sentinels name, found again after a failover."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> "SentinelPool":
        parsed = parse(url)
        if parsed is None:
            raise ImproperlyConfigured(f"not a {SCHEME}:// URL")
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            list(parsed.sentinels), sentinel_kwargs={"socket_timeout": SENTINEL_TIMEOUT_S}
        )
        return cls(parsed.master, sentinel, db=parsed.db, password=parsed.password, **options)
