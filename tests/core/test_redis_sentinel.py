"""REDIS_URL through Redis Sentinel (starverse.core.redis_sentinel): the URL's parts, and on a
real master, replica and sentinel (redis-server processes of this test), the cache the settings
build and the Celery broker kombu reaches both find the master, and find the new one after a
failover."""

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import ImproperlyConfigured
from kombu import Connection

from starverse.core import redis_sentinel
from starverse.core.redis_sentinel import SentinelUrl

MASTER = "starverse"


def test_a_sentinel_url_is_taken_apart():
    url = "redis+sentinel://:s%40cret@sentinel-0:26380,sentinel-1/starverse/2"
    assert redis_sentinel.parse(url) == SentinelUrl(
        (("sentinel-0", 26380), ("sentinel-1", 26379)), "starverse", 2, "s@cret"
    )
    assert redis_sentinel.parse("redis://:pw@redis:6379/0") is None
    broker, options = redis_sentinel.celery_broker(url)
    assert broker == ("sentinel://:s@cret@sentinel-0:26380/2;sentinel://:s@cret@sentinel-1:26379/2")
    assert options["master_name"] == "starverse"
    assert redis_sentinel.celery_broker("redis://r:6379/1") == ("redis://r:6379/1", {})
    assert redis_sentinel.cache_location(url) == (
        [url],
        {"pool_class": "starverse.core.redis_sentinel.SentinelPool"},
    )


@pytest.mark.parametrize(
    "url",
    ["redis+sentinel://s:26379", "redis+sentinel://s:port/m", "redis+sentinel://s/m/zero"],
)
def test_a_malformed_sentinel_url_fails_the_start_saying_the_form(url):
    with pytest.raises(ImproperlyConfigured, match="<master name>"):
        redis_sentinel.parse(url)


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait(check: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _master_port(watcher: int) -> int:
    address: Any = redis.Redis(port=watcher).sentinel_get_master_addr_by_name(MASTER)
    return int(address[1])


def _write(cache: RedisCache, key: str) -> bool:
    cache.set(key, "failover")
    return True


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[tuple[int, int, int]]:
    """A master, its replica and a sentinel watching them: their ports."""
    server = shutil.which("redis-server")
    assert server, "this test needs redis-server (Debian's redis-server package)"
    master, replica, watcher = _port(), _port(), _port()
    # --dir: a full resynchronisation after the failover writes the master's RDB file there,
    # never into the working tree
    common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
    conf = tmp_path / "sentinel.conf"
    conf.write_text(
        f"port {watcher}\nbind 127.0.0.1\n"
        f"sentinel monitor {MASTER} 127.0.0.1 {master} 1\n"
        f"sentinel down-after-milliseconds {MASTER} 1000\n"
        f"sentinel failover-timeout {MASTER} 5000\n"
    )
    processes = [
        subprocess.Popen([server, "--port", str(master), *common], stdout=subprocess.DEVNULL),
        subprocess.Popen(
            [server, "--port", str(replica), "--replicaof", "127.0.0.1", str(master), *common],
            stdout=subprocess.DEVNULL,
        ),
    ]
    _wait(
        lambda: redis.Redis(port=replica).info("replication")["master_link_status"] == "up",
        "the replica to follow the master",
    )
    processes.append(
        subprocess.Popen([server, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, cwd=tmp_path)
    )
    try:
        _wait(
            lambda: redis.Redis(port=watcher).sentinel_slaves(MASTER),
            "the sentinel to find the replica",
        )
        yield master, replica, watcher
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)


def _failover(watcher: int) -> bool:
    """Ask for a failover; False while the sentinel has no replica it deems good yet
    (NOGOODSLAVE: its last INFO of the replica is not recent enough; on a busy machine)."""
    try:
        redis.Redis(port=watcher).execute_command("SENTINEL", "FAILOVER", MASTER)
    except redis.exceptions.ResponseError as error:
        if "NOGOODSLAVE" in str(error):
            return False
        raise
    return True


def test_the_cache_and_the_broker_follow_the_master_through_a_failover(sentinel):
    master, replica, watcher = sentinel
    url = f"redis+sentinel://127.0.0.1:{watcher}/{MASTER}/3"
    location, options = redis_sentinel.cache_location(url)
    cache = RedisCache(location, {"OPTIONS": options, "KEY_PREFIX": "drill"})
    cache.set("before", "failover")
    assert redis.Redis(port=master, db=3).exists(":1:".join(["drill", "before"])) == 1

    broker, transport = redis_sentinel.celery_broker(url)
    with Connection(broker, transport_options=transport) as connection:
        queue = connection.SimpleQueue("drill")
        queue.put({"n": 1})
        message = queue.get(timeout=5)
        message.ack()
        assert message.payload == {"n": 1}
        queue.close()

    _wait(lambda: _failover(watcher), "the sentinel to take the failover")
    _wait(
        lambda: _master_port(watcher) == replica,
        "the replica to be the master",
    )
    # the old master follows the new one (until then it still takes writes: Redis's window)
    _wait(
        lambda: redis.Redis(port=master).info("replication")["role"] == "slave",
        "the old master to follow the new one",
    )
    # the same cache object: its pool asks the sentinel again once its connections break
    _wait(lambda: _write(cache, "after"), "the cache to write again", 30)
    assert cache.get("before") == "failover" and cache.get("after") == "failover"
    assert redis.Redis(port=replica, db=3).exists("drill:1:after") == 1
    with Connection(broker, transport_options=transport) as connection:
        queue = connection.SimpleQueue("drill")
        queue.put({"n": 2})
        message = queue.get(timeout=5)
        message.ack()
        assert message.payload == {"n": 2}
        queue.close()
