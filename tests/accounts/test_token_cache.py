"""The per-process token cache (API_TOKEN_CACHE_S): a token that authenticated is not looked up
again within the TTL; a change made through the services holds at once, in this process and
(through the credentials generation that the throttle's one Redis call reads) in another one;
one made outside them (a database shell) holds once the TTL has passed; a refused token is
never remembered."""

import json
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.test import APIClient, APIRequestFactory

from starverse.accounts import token_cache
from starverse.accounts.authentication import BearerTokenAuthentication, _lookup, _user_and_token
from starverse.accounts.models import ApiToken, User
from starverse.accounts.services import token_create, token_revoke
from teams.services import membership_remove, membership_role_set
from tests.conftest import served_database_url
from tests.factories import make_token, make_user
from tests.teams.test_teams import join

REPO = Path(__file__).resolve().parents[2]
# Another web process of the platform, on the same database and cache: it revokes a token
# through the service, as the API's DELETE /tokens/{id} does there.
REVOKE_ELSEWHERE = """
import json, sys
import django
django.setup()
from django.test.utils import override_settings
with override_settings(CACHES={"default": json.loads(sys.argv[1])}):
    from starverse.accounts.models import ApiToken
    from starverse.accounts.services import token_revoke
    token_revoke(token=ApiToken.objects.get(pk=sys.argv[2]))
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0


@pytest.fixture
def clock(db: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The cache on, at its default TTL, on a clock the test moves."""
    settings.API_TOKEN_CACHE_S = 2
    moving = Clock()
    monkeypatch.setattr(token_cache, "monotonic", lambda: moving.now)
    token_cache.token_cache_forget()
    # the process has read the (emptied) cache's credentials generation before: a first
    # reading forgets every entry, since they may predate it
    token_cache.token_cache_observe(0)
    return moving


def _bearer(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def _token_queries(client: APIClient) -> tuple[int, int]:
    """The answer's status and how many of its queries read or wrote tokens."""
    with CaptureQueriesContext(connection) as queries:
        status = client.get("/api/v1/me").status_code
    return status, sum("accounts_apitoken" in query["sql"] for query in queries)


def test_a_token_is_looked_up_once_within_the_ttl_and_again_after_it(clock, user):
    _token, plaintext = make_token(user)
    client = _bearer(plaintext)

    assert _token_queries(client) == (200, 2)  # the lookup, and its first use recorded
    clock.now += 1.9
    assert _token_queries(client) == (200, 0)
    clock.now += 0.2
    assert _token_queries(client) == (200, 1)  # looked up again; its use was recorded already
    assert ApiToken.objects.get(token_hash__isnull=False).last_used_at is not None


def test_each_request_gets_its_own_user_and_token(clock, user):
    _token, plaintext = make_token(user)
    client = _bearer(plaintext)
    client.get("/api/v1/me")
    digest = ApiToken.objects.get().token_hash
    entry = token_cache.token_cache_get(digest)
    assert entry is not None

    first, second = _user_and_token(digest, entry), _user_and_token(digest, entry)
    assert first[0] is not second[0] and first[1] is not second[1]
    assert (first[0].pk, first[0].email, first[1].pk, first[1].user) == (
        user.pk,
        user.email,
        ApiToken.objects.get().pk,
        first[0],
    )
    assert first[1].scopes == ["read", "instances", "billing", "admin"]
    first[1].scopes.append("extra")
    assert second[1].scopes == ["read", "instances", "billing", "admin"]


def test_a_revocation_through_this_process_holds_at_once(clock, user):
    token, plaintext = make_token(user)
    client = _bearer(plaintext)
    assert client.get("/api/v1/me").status_code == 200

    token_revoke(token=token)

    assert client.get("/api/v1/me").status_code == 401


def test_a_revocation_outside_the_services_holds_once_the_ttl_has_passed(clock, user):
    token, plaintext = make_token(user)
    client = _bearer(plaintext)
    assert client.get("/api/v1/me").status_code == 200

    # a database shell revokes it: no credentials generation moves, the entry expires
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    clock.now += 1.0
    assert client.get("/api/v1/me").status_code == 200
    clock.now += 1.0
    refused = client.get("/api/v1/me")
    assert (refused.status_code, refused.json()["code"]) == (401, "authentication_failed")


def test_a_deactivation_elsewhere_holds_once_the_ttl_has_passed(clock, user):
    _token, plaintext = make_token(user)
    client = _bearer(plaintext)
    assert client.get("/api/v1/me").status_code == 200

    User.objects.filter(pk=user.pk).update(is_active=False)
    assert client.get("/api/v1/me").status_code == 200
    clock.now += 2.0
    assert client.get("/api/v1/me").status_code == 401


def test_a_refused_token_is_never_remembered(clock, user):
    token, plaintext = make_token(user)
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    client = _bearer(plaintext)
    assert client.get("/api/v1/me").status_code == 401

    ApiToken.objects.filter(pk=token.pk).update(revoked_at=None)

    assert client.get("/api/v1/me").status_code == 200


def test_a_lookup_that_raced_a_revocation_is_not_kept(clock, user):
    make_token(user)
    digest = ApiToken.objects.get().token_hash
    generation = token_cache.token_cache_generation()
    found = _lookup(digest)  # read before the revocation below committed
    token_cache.token_cache_forget()
    token_cache.token_cache_put(digest, found, generation=generation)

    assert token_cache.token_cache_get(digest) is None


def _acting_role(plaintext: str) -> str:
    request = Request(APIRequestFactory().get("/", HTTP_AUTHORIZATION=f"Bearer {plaintext}"))
    found = BearerTokenAuthentication().authenticate(request)
    assert found is not None
    return found[0].acting_role


def test_a_changed_role_and_a_removed_member_hold_at_once(clock):
    from billing.onboarding import team_create

    owner, member = make_user(), make_user()
    team = team_create(user=owner, name="Vision lab")
    join(team, owner, member, role="admin")
    _token, plaintext = token_create(user=member, name="team", team_id=team.pk)
    assert _acting_role(plaintext) == "admin"

    membership_role_set(actor=owner, team=team, user_id=member.pk, role="billing")
    assert _acting_role(plaintext) == "billing"
    membership_remove(actor=owner, team=team, user_id=member.pk)

    assert _bearer(plaintext).get("/api/v1/me").status_code == 401


def test_no_cache_at_zero(settings, user):
    settings.API_TOKEN_CACHE_S = 0
    _token, plaintext = make_token(user)
    client = _bearer(plaintext)
    client.get("/api/v1/me")

    assert _token_queries(client) == (200, 1)
    assert token_cache._entries == {}


def _shared_cache(settings: Any, default: dict[str, str]) -> dict[str, str]:
    """`default` as the default cache, which processes share; the token cache on for longer
    than the test takes."""
    settings.CACHES = {"default": default}
    settings.API_TOKEN_CACHE_S = 600
    token_cache.token_cache_forget()
    return default


@pytest.fixture
def redis_cache(redis_url: str, settings: Any) -> dict[str, str]:
    """The default cache on Redis, as in production, under a key prefix of this test's."""
    backend = "django.core.cache.backends.redis.RedisCache"
    prefix = f"test-{uuid.uuid4().hex}"
    return _shared_cache(
        settings, {"BACKEND": backend, "LOCATION": redis_url, "KEY_PREFIX": prefix}
    )


@pytest.fixture(params=["redis", "file"])
def shared_cache(request: Any, settings: Any, tmp_path: Path) -> dict[str, str]:
    """Production's Redis cache, or `make run`'s file cache without REDIS_URL."""
    if request.param == "redis":
        return request.getfixturevalue("redis_cache")
    backend = "django.core.cache.backends.filebased.FileBasedCache"
    return _shared_cache(settings, {"BACKEND": backend, "LOCATION": str(tmp_path / "cache")})


def _cached(client: APIClient) -> None:
    """Requests until the token is served from this process's cache (the first reading of the
    credentials generation forgets what was looked up before it)."""
    for _ in range(2):
        assert client.get("/api/v1/me").status_code == 200
    assert _token_queries(client) == (200, 0)


def test_a_revocation_in_another_process_holds_on_the_next_request(transactional_db, shared_cache):
    token, plaintext = make_token(make_user())
    client = _bearer(plaintext)
    _cached(client)

    revoked = subprocess.run(
        [sys.executable, "-c", REVOKE_ELSEWHERE, json.dumps(shared_cache), token.pk],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": served_database_url()}
        | {"DJANGO_SETTINGS_MODULE": "starverse.settings.test"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert revoked.returncode == 0, revoked.stderr
    assert token_cache.token_cache_get(token.token_hash) is not None  # this process kept it

    refused = client.get("/api/v1/me")
    assert (refused.status_code, refused.json()["code"]) == (401, "authentication_failed")
    assert token_cache.token_cache_get(token.token_hash) is None


def test_another_process_s_change_of_a_member_s_role_holds_on_the_next_request(
    clock, redis_cache, django_capture_on_commit_callbacks
):
    from billing.onboarding import team_create

    owner, member = make_user(), make_user()
    team = team_create(user=owner, name="Vision lab")
    join(team, owner, member, role="admin")
    _token, plaintext = token_create(user=member, name="team", team_id=team.pk)
    client = _bearer(plaintext)
    _cached(client)
    entries = dict(token_cache._entries)

    with django_capture_on_commit_callbacks(execute=True):
        membership_role_set(actor=owner, team=team, user_id=member.pk, role="billing")
    token_cache._entries.update(entries)  # as if another process made the change

    assert client.get("/api/v1/me").json()["team"]["role"] == "billing"


def _redis_commands(url: str, request: Any) -> dict[str, int]:
    """The Redis commands, by name, that `request()` made the server run (a script's own
    commands included): the calls' difference in INFO commandstats, INFO itself left out."""
    server = redis.Redis.from_url(url)

    def calls() -> dict[str, int]:
        stats = server.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}

    before = calls()
    request()
    after = calls()
    changed = {name: after[name] - before.get(name, 0) for name in after}
    return {name: n for name, n in changed.items() if n and name != "info"}


def test_an_api_request_makes_one_round_trip_to_redis(db, user, redis_cache, redis_url):
    _token, plaintext = make_token(user)
    client = _bearer(plaintext)
    _cached(client)

    # EVALSHA, and the script's commands: the window's and the credentials generation's GET
    assert _redis_commands(redis_url, lambda: client.get("/api/v1/me")) == {
        "evalsha": 1,
        "get": 1,
        "zremrangebyscore": 1,
        "zcard": 1,
        "zadd": 1,
        "expire": 1,
    }


def test_a_revocation_holds_when_the_cache_is_down_and_says_so(
    user, settings, caplog, django_capture_on_commit_callbacks
):
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        backend = "django.core.cache.backends.redis.RedisCache"
        location = f"redis://127.0.0.1:{closed.getsockname()[1]}/0"
        settings.CACHES = {"default": {"BACKEND": backend, "LOCATION": location}}
        token, _plaintext = make_token(user)

        with django_capture_on_commit_callbacks(execute=True):
            token_revoke(token=token)

    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    assert "credentials.generation_not_raised error=ConnectionError" in caplog.text
