"""The per-process token cache (API_TOKEN_CACHE_S): a token that authenticated is not looked up
again within the TTL; a change made through this process's services holds at once, one made
elsewhere holds once the TTL has passed; a refused token is never remembered."""

from typing import Any

import pytest
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
from tests.factories import make_token, make_user
from tests.teams.test_teams import join


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


def test_a_revocation_elsewhere_holds_once_the_ttl_has_passed(clock, user):
    token, plaintext = make_token(user)
    client = _bearer(plaintext)
    assert client.get("/api/v1/me").status_code == 200

    # another process (or a database shell) revokes it: this one learns of it within the TTL
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
