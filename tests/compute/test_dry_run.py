"""`dry_run: true` on every order and start (compute.dryrun): the product's own order path
runs with admission, so a dry run answers the very refusal the real order gets (the balance,
trial credit that does not pay the offering, the trial's premium-GPU limit, the GPU limit, the
queued-orders limit, a budget, a hold), for instances, clusters, jobs and endpoints alike; it
creates nothing (no row, no holding, no ledger entry) and leaves the Idempotency-Key unused;
what it takes it quotes (price, who pays, runway, place in the queue)."""

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from billing.choices import TransactionKind
from billing.holds import hold_place
from billing.models import LedgerTransaction
from billing.selectors import wallet_for_tenant
from billing.services import ledger_post
from clusters.models import Cluster
from compute.models import Holding, Offering, TenantLimits
from endpoints.models import Endpoint
from instances.budgets import budget_set
from instances.models import Instance
from jobs.models import Job
from starverse.accounts.services import token_create
from tests.factories import (
    CLOUD_GPU,
    WHOLE_NODE,
    _seed_catalog,
    fund,
    make_cluster,
    make_instance,
    make_public_model,
    make_team_with_budget,
    make_user,
)

MODELS = (Instance, Cluster, Job, Endpoint, Holding, LedgerTransaction)


def _made() -> list[int]:
    return [model.objects.count() for model in MODELS]


def _offering(name: str) -> str:
    return Offering.objects.get(name=name).id


def _instance(offering: str) -> dict[str, Any]:
    return {"offering": _offering(offering), "image": "pytorch-2.1", "name": "box"}


def _cluster(offering: str) -> dict[str, Any]:
    return {"offering": _offering(WHOLE_NODE), "image": "pytorch-2.1", "node_count": 2}


def _job(offering: str) -> dict[str, Any]:
    return {"offering": _offering(offering), "image": "pytorch-2.1", "command": "python t.py"}


def _endpoint(offering: str) -> dict[str, Any]:
    return {
        "name": "qwen",
        "source": {"dataset": "qwen2-7b-instruct"},
        "engine": "vllm",
        "offering": _offering(offering),
        "min_replicas": 1,
        "max_replicas": 1,
    }


BODIES: dict[str, Callable[[str], dict[str, Any]]] = {
    "instances": _instance,
    "clusters": _cluster,
    "jobs": _job,
    "endpoints": _endpoint,
}


def _bearer(user: Any, team: Any = None) -> APIClient:
    _token, plaintext = token_create(user=user, name="t", team_id=team.pk if team else None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def _funded() -> Any:
    user = make_user()
    fund(user, 10_000_000)
    return user


def _balance() -> tuple[APIClient, str]:
    return _bearer(make_user(verified=False)), CLOUD_GPU  # no trial credit, no cash


def _trial() -> tuple[APIClient, str]:
    return _bearer(make_user()), CLOUD_GPU  # ¥10 of trial credit, which 1× H100 is not paid by


def _trial_limit() -> tuple[APIClient, str]:
    user = make_user()  # ¥10 of trial credit: an hour of the whole H100 node at its trial price
    TenantLimits.objects.create(tenant=user.tenant, trial_max_premium_gpus=0)
    return _bearer(user), WHOLE_NODE


def _gpu_limit() -> tuple[APIClient, str]:
    user = _funded()
    TenantLimits.objects.create(tenant=user.tenant, max_running_gpus=0)
    return _bearer(user), CLOUD_GPU


def _queue_limit() -> tuple[APIClient, str]:
    user = _funded()  # no node is known here: every order waits in the queue
    TenantLimits.objects.create(tenant=user.tenant, max_queued_orders=0)
    return _bearer(user), CLOUD_GPU


def _budget() -> tuple[APIClient, str]:
    ana, bob, team = make_team_with_budget()
    ledger_post(
        wallet_id=wallet_for_tenant(team.pk).id,
        key="topup:test:team",
        kind=TransactionKind.TOPUP,
        amount_fen=10_000_000,
        description="Top-up",
    )
    budget_set(actor=ana, team=team, user_id=bob.pk, monthly_fen=1)
    return _bearer(bob, team), CLOUD_GPU


def _hold() -> tuple[APIClient, str]:
    user = _funded()
    hold_place(tenant_id=user.tenant_id, key="dispute:dp_dry", reason="test")
    return _bearer(user), CLOUD_GPU


# refusal kind → (its setup, the products it applies to, its status and code)
KINDS: dict[str, tuple[Callable[[], tuple[APIClient, str]], set[str], int, str]] = {
    "balance": (_balance, set(BODIES), 402, "insufficient_balance"),
    "trial_offering": (_trial, set(BODIES), 402, "insufficient_balance"),
    "trial_limit": (_trial_limit, {"instances", "jobs"}, 409, "trial_limit"),
    "gpu_limit": (_gpu_limit, set(BODIES), 409, "gpu_limit"),
    "queue_limit": (_queue_limit, {"instances", "clusters", "jobs"}, 429, "queue_limit"),
    "budget": (_budget, set(BODIES), 402, "budget_exceeded"),
    "hold": (_hold, set(BODIES), 403, "account_on_hold"),
}
CASES = [(p, k) for k, (_s, products, _st, _c) in KINDS.items() for p in sorted(products)]


@pytest.mark.parametrize(("product", "kind"), CASES)
def test_a_dry_run_answers_the_refusal_the_real_order_gets_and_creates_nothing(db, product, kind):
    _seed_catalog()
    make_public_model()
    setup, _products, status, code = KINDS[kind]
    client, offering = setup()
    body = BODIES[product](offering)
    path = f"/api/v1/{product}"
    before = _made()

    dry = client.post(path, {**body, "dry_run": True}, format="json", HTTP_IDEMPOTENCY_KEY="k")

    assert dry.status_code == 200, dry.content
    assert _made() == before
    real = client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    if product == "endpoints" and kind == "gpu_limit":
        status = 400  # an endpoint's names its max_replicas field
    assert (real.status_code, real.json()["code"]) == (status, code), real.content
    assert dry.json()["refusal"] == {"status": real.status_code, **real.json()}
    assert _made() == before


@pytest.mark.parametrize("product", sorted(BODIES))
def test_a_dry_run_that_would_be_taken_quotes_it_and_leaves_the_key_unused(db, product):
    _seed_catalog()
    make_public_model()
    user = _funded()
    client = _bearer(user)
    body = BODIES[product](CLOUD_GPU)
    path = f"/api/v1/{product}"
    before = _made()

    dry = client.post(path, {**body, "dry_run": True}, format="json", HTTP_IDEMPOTENCY_KEY="k")

    assert dry.status_code == 200, dry.content
    assert _made() == before
    quote, refusal = dry.json()["quote"], dry.json()["refusal"]
    assert refusal is None
    offering = Offering.objects.get(pk=body["offering"])
    units = body.get("node_count", 1)
    price = offering.price_per_hour_fen * units
    assert quote["price_per_hour_fen"] == price
    assert quote["paid_by"] == "cash"
    assert quote["runway_hours"] == round(10_000_000 / price, 1)
    if product == "endpoints":  # replicas are placed later, not queued at the order
        assert (quote["queue_position"], quote["expected_start_s"]) == (None, None)
    else:  # no node is known here: it would wait, first in line
        assert (quote["queue_position"], quote["expected_start_s"]) == (1, None)
    real = client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert real.status_code == 202, real.content  # the key was not used by the dry run
    again = client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert again.json()["id"] == real.json()["id"]


def test_trial_credit_pays_an_offering_with_a_trial_price_and_the_quote_says_so(db):
    _seed_catalog()
    client = _bearer(make_user())  # ¥10 of trial credit
    body = _instance("1× A100 80GB SXM")  # ¥0.83 an hour at its trial price

    quote = client.post("/api/v1/instances", {**body, "dry_run": True}, format="json").json()

    assert quote["refusal"] is None
    assert quote["quote"]["paid_by"] == "trial"
    assert quote["quote"]["price_per_hour_fen"] == 83
    assert quote["quote"]["runway_hours"] == round(1000 / 83, 1)


def test_a_start_dry_run_quotes_gpus_at_once_and_refuses_as_the_start_does(catalog):
    user = _funded()
    instance = make_instance(user, "stopped")
    client = _bearer(user)
    path = f"/api/v1/instances/{instance.pk}/start"
    before = _made()

    dry = client.post(path, {"dry_run": True}, format="json")

    assert dry.status_code == 200, dry.content
    assert dry.json()["refusal"] is None
    assert dry.json()["quote"]["expected_start_s"] == 0  # a free H100 in the emulator's fleet
    assert dry.json()["quote"]["queue_position"] is None
    instance.refresh_from_db()
    assert (instance.status, _made()) == ("stopped", before)
    TenantLimits.objects.create(tenant=user.tenant, max_running_gpus=0)
    dry = client.post(path, {"dry_run": True}, format="json")
    real = client.post(path)
    assert (real.status_code, real.json()["code"]) == (409, "gpu_limit")
    assert dry.json()["refusal"] == {"status": 409, **real.json()}


def test_another_tenants_instance_is_a_404_to_a_dry_run_too(db):
    _seed_catalog()
    instance = make_instance(_funded())
    answer = _bearer(_funded()).post(
        f"/api/v1/instances/{instance.pk}/start", {"dry_run": True}, format="json"
    )
    assert answer.status_code == 404


def test_a_cluster_start_dry_run_answers_its_refusal(db):
    user = _funded()
    cluster = make_cluster(user)  # no node is known here: it waits, so it cannot be started
    path = f"/api/v1/clusters/{cluster.pk}/start"
    client = _bearer(user)

    dry = client.post(path, {"dry_run": True}, format="json")
    real = client.post(path)

    assert (real.status_code, real.json()["code"]) == (409, "wrong_state")
    assert dry.json() == {"quote": None, "refusal": {"status": 409, **real.json()}}


def test_an_endpoint_scale_up_dry_run_answers_the_limit_a_real_one_meets(db):
    _seed_catalog()
    make_public_model()
    user = _funded()
    client = _bearer(user)
    endpoint = client.post("/api/v1/endpoints", _endpoint(CLOUD_GPU), format="json").json()["id"]
    TenantLimits.objects.create(tenant=user.tenant, max_running_gpus=1)
    path = f"/api/v1/endpoints/{endpoint}"

    dry = client.patch(path, {"max_replicas": 2, "dry_run": True}, format="json")
    assert Endpoint.objects.get(pk=endpoint).max_replicas == 1
    real = client.patch(path, {"max_replicas": 2}, format="json")

    assert (real.status_code, real.json()["code"]) == (400, "gpu_limit")
    assert dry.json()["refusal"] == {"status": 400, **real.json()}
    assert dry.json()["quote"]["price_per_hour_fen"] > 0
