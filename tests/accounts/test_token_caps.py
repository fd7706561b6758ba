"""API tokens with spending caps and an expiry (compute.token_caps): an order or a start
through a capped token that would take its spend past its cap is refused 402 `token_cap`
(saying the cap, what is spent and how to raise it), counted under the wallet lock so two
orders at once cannot both pass; the day's cap counts the day's spend; what an order has
cost counts once it is more than its first hour; an expired token is refused; a capped token
cannot mint itself an uncapped one; the console makes capped tokens too."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from billing.choices import TransactionKind
from billing.services import ledger_post
from compute.models import Offering, TokenOrder
from compute.token_caps import token_spent_fen
from instances.models import Instance
from starverse.accounts.models import ApiToken
from starverse.accounts.services import TokenCaps, token_create
from tests.conftest import run_threads
from tests.factories import CLOUD_GPU, PASSWORD, _seed_catalog, fund, make_user

HOUR = 2200  # 1× H100 80GB SXM, an hour (checked below)


def _capped(user: Any, **caps: Any) -> tuple[ApiToken, APIClient]:
    token, plaintext = token_create(user=user, name="agent", caps=TokenCaps(**caps))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return token, client


def _order(client: APIClient, **extra: Any) -> Any:
    body = {"offering": Offering.objects.get(name=CLOUD_GPU).id, "image": "pytorch-2.1"}
    return client.post("/api/v1/instances", {**body, **extra}, format="json")


@pytest.fixture
def payer(db):
    _seed_catalog()
    assert Offering.objects.get(name=CLOUD_GPU).price_per_hour_fen == HOUR
    user = make_user()
    fund(user, 10_000_000)
    return user


def test_a_capped_token_is_refused_the_order_past_its_cap_saying_how_to_raise_it(payer):
    _token, client = _capped(payer, max_spend_fen=HOUR + 100)

    assert _order(client).status_code == 202
    dry = _order(client, dry_run=True)
    refused = _order(client)

    assert (refused.status_code, refused.json()["code"]) == (402, "token_cap")
    assert refused.json()["detail"] == (
        "This API token may spend at most ¥23.00; its orders have spent ¥22.00 and this one "
        "needs ¥22.00 for its first hour. Make a token with a higher cap (Account → API "
        "tokens, or POST /api/v1/tokens with max_spend_fen)."
    )
    assert dry.json()["refusal"] == {"status": 402, **refused.json()}
    assert Instance.objects.filter(tenant=payer.tenant).count() == 1
    # the same account through another token, or the console, is not this token's to cap
    _other, uncapped = _capped(payer)
    assert _order(uncapped).status_code == 202


def test_two_orders_at_once_cannot_both_pass_the_cap(transactional_db):
    _seed_catalog()
    user = make_user()
    fund(user, 10_000_000)
    token, plaintext = token_create(
        user=user, name="agent", caps=TokenCaps(max_spend_fen=HOUR * 3 // 2)
    )
    plaintext_clients = []
    for _ in range(2):  # each thread its own client of the same token
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
        plaintext_clients.append(client)

    answers = run_threads(2, lambda i: _order(plaintext_clients[i]).status_code)

    assert sorted(answers) == [202, 402], answers
    assert TokenOrder.objects.filter(token=token).count() == 1


def test_the_day_cap_counts_todays_orders_and_the_life_cap_all_of_them(payer):
    token, client = _capped(payer, max_spend_per_day_fen=HOUR, max_spend_fen=HOUR * 3)
    TokenOrder.objects.create(
        token=token,
        ordered_id="ins_yesterday",
        first_hour_fen=HOUR * 2,
        created_at=timezone.now() - timedelta(days=1, hours=1),
    )

    assert _order(client).status_code == 202  # today: nothing spent yet
    refused = _order(client)
    assert (refused.status_code, refused.json()["code"]) == (402, "token_cap")
    assert "at most ¥22.00 a day; its orders have spent ¥22.00 today" in refused.json()["detail"]
    assert token_spent_fen(token.id) == HOUR * 3
    ApiToken.objects.filter(pk=token.pk).update(max_spend_per_day_fen=None)
    again = _order(client)
    assert (again.status_code, again.json()["code"]) == (402, "token_cap")
    assert "at most ¥66.00; its orders have spent ¥66.00" in again.json()["detail"]


def test_what_an_order_has_cost_counts_once_it_is_more_than_its_first_hour(payer):
    token, client = _capped(payer, max_spend_fen=HOUR * 10)
    instance_id = _order(client).json()["id"]
    assert token_spent_fen(token.id) == HOUR
    ledger_post(
        wallet_id=payer.tenant.wallet.id,
        key="usage:test:tokencap",
        kind=TransactionKind.USAGE,
        amount_fen=-HOUR * 4,
        description="Usage",
        instance_id=instance_id,
    )
    assert token_spent_fen(token.id) == HOUR * 4


def test_an_expired_token_is_refused_and_one_expiring_later_works(payer):
    _token, client = _capped(payer, expires_at=timezone.now() + timedelta(days=1))
    assert client.get("/api/v1/instances").status_code == 200
    expired, late = _capped(payer)
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(days=1))

    refused = late.get("/api/v1/instances")

    assert refused.status_code == 401
    assert refused.json()["detail"].startswith("This token expired on ")
    assert refused.json()["detail"].endswith(": make a new one.")


def test_an_expiry_in_the_past_is_refused_at_creation(payer):
    client = APIClient()
    client.force_authenticate(payer)
    answer = client.post(
        "/api/v1/tokens",
        {"name": "x", "expires_at": (timezone.now() - timedelta(hours=1)).isoformat()},
        format="json",
    )
    assert (answer.status_code, answer.json()["code"]) == (400, "invalid")


def test_a_capped_token_cannot_mint_itself_an_uncapped_or_a_larger_one(payer):
    _token, client = _capped(payer, max_spend_fen=1000, expires_at=timezone.now() + timedelta(1))

    minted = client.post("/api/v1/tokens", {"name": "child"}, format="json")
    larger = client.post("/api/v1/tokens", {"name": "c", "max_spend_fen": 5000}, format="json")

    assert minted.status_code == 201, minted.content
    assert minted.json()["max_spend_fen"] == 1000
    assert minted.json()["expires_at"] is not None
    assert (larger.status_code, larger.json()["code"]) == (403, "token_cap")


def test_the_api_lists_a_tokens_caps(payer):
    token, client = _capped(payer, max_spend_fen=500, max_spend_per_day_fen=100)
    rows = client.get("/api/v1/tokens").json()["results"]
    mine = next(row for row in rows if row["id"] == token.id)
    assert (mine["max_spend_fen"], mine["max_spend_per_day_fen"]) == (500, 100)


def test_the_console_makes_a_capped_token(payer, client):
    assert client.login(username=payer.email, password=PASSWORD)
    answer = client.post(
        "/accounts/tokens/",
        {
            "name": "agent",
            "team": "personal",
            "scopes": ["read", "instances"],
            "max_spend": "200",
            "max_spend_per_day": "50.5",
            "expires_at": (timezone.localdate() + timedelta(days=30)).isoformat(),
        },
    )
    assert answer.status_code == 200
    token = ApiToken.objects.get(user=payer, name="agent")
    assert (token.max_spend_fen, token.max_spend_per_day_fen) == (20000, 5050)
    assert token.expires_at is not None
