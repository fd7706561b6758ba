"""The API's per-user throttle on Redis: one script call per request, the same sliding-window
rule as DRF's, and no request let through twice by a race. Run against a Redis server of their
own (Debian's redis-server, which .ci/run installs; without it these fail, they do not skip)."""

import threading
import uuid
from types import SimpleNamespace

import pytest
from django.core.cache.backends.redis import RedisCache

from starverse.core.api.throttling import UserRateThrottle


@pytest.fixture
def redis_cache(redis_url: str) -> RedisCache:
    return RedisCache(redis_url, {"KEY_PREFIX": f"test-{uuid.uuid4().hex}"})


def _throttle(cache, rate="3/min", now=1000.0):
    class Throttle(UserRateThrottle):
        pass

    Throttle.rate = rate
    throttle = Throttle()
    throttle.cache = cache
    throttle.timer = lambda: now
    return throttle


def _request(user_id="usr_1"):
    return SimpleNamespace(user=SimpleNamespace(pk=user_id, is_authenticated=True), META={})


def test_lets_the_rate_through_then_refuses_with_the_wait_until_the_oldest_leaves(redis_cache):
    answers = [
        _throttle(redis_cache, now=1000.0 + i).allow_request(_request(), None) for i in range(3)
    ]
    refused = _throttle(redis_cache, now=1010.0)

    assert answers == [True, True, True]
    assert refused.allow_request(_request(), None) is False
    assert refused.wait() == pytest.approx(50.0)  # the first request leaves the window at 1060
    # another user has a window of its own; after the oldest left, one more is let through
    assert _throttle(redis_cache, now=1010.0).allow_request(_request("usr_2"), None) is True
    assert _throttle(redis_cache, now=1060.5).allow_request(_request(), None) is True
    assert _throttle(redis_cache, now=1060.6).allow_request(_request(), None) is False


def test_concurrent_requests_never_exceed_the_rate(redis_cache):
    allowed = []
    barrier = threading.Barrier(8)

    def hit():
        barrier.wait(timeout=10)
        allowed.append(_throttle(redis_cache, rate="5/min").allow_request(_request(), None))

    threads = [threading.Thread(target=hit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(allowed) == [False] * 3 + [True] * 5


def test_other_caches_keep_drfs_way(settings):
    from django.core.cache.backends.locmem import LocMemCache

    cache = LocMemCache(f"throttle-{uuid.uuid4().hex}", {})
    answers = [_throttle(cache, rate="2/min").allow_request(_request(), None) for _ in range(3)]

    assert answers == [True, True, False]
    assert cache.get("throttle_user_usr_1") == [1000.0, 1000.0]
