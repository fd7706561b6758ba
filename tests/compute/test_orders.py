"""One order admission for every product (compute.orders, compute.admission.admit): the same
Idempotency-Key with the same request answers the earlier order and with another request is a
409, and an account on hold is refused, for instances, clusters and endpoints alike; an order
that loses the race to a concurrent one under its key answers the winner; an order's own cost
is an hour of its units."""

from dataclasses import replace

import pytest
from django.db import IntegrityError

from billing.holds import hold_place
from clusters.models import Cluster
from compute.models import Holding, Offering
from compute.orders import Order, OrderKey, order_commit, ordered_before
from endpoints.models import Endpoint
from instances.models import Instance
from starverse.core.errors import IdempotencyConflict
from tests.factories import (
    WHOLE_NODE,
    _seed_catalog,
    fund,
    make_cluster,
    make_public_model,
    make_user,
)

H100 = "1× H100 80GB SXM"


def _instance_body(changed: bool) -> dict:
    return {
        "offering": Offering.objects.get(name=H100).id,
        "image": "pytorch-2.1",
        "name": "other" if changed else "box",
    }


def _cluster_body(changed: bool) -> dict:
    return {
        "offering": Offering.objects.get(name=WHOLE_NODE).id,
        "image": "pytorch-2.1",
        "node_count": 2,
        "template": "none" if changed else "torchrun",
    }


def _endpoint_body(changed: bool) -> dict:
    return {
        "name": "other" if changed else "qwen",
        "source": {"dataset": "qwen2-7b-instruct"},
        "engine": "vllm",
        "offering": Offering.objects.get(name=H100).id,
        "min_replicas": 1,
        "max_replicas": 1,
    }


PRODUCTS = {
    "instances": (lambda: list(Instance.objects.values_list("pk", flat=True)), _instance_body),
    "clusters": (lambda: list(Cluster.objects.values_list("pk", flat=True)), _cluster_body),
    "endpoints": (lambda: list(Endpoint.objects.values_list("pk", flat=True)), _endpoint_body),
}


@pytest.mark.parametrize("product", sorted(PRODUCTS))
def test_the_same_key_answers_the_same_order_and_another_request_under_it_is_a_409(
    db, client_for, product
):
    made, body = PRODUCTS[product]
    _seed_catalog()
    make_public_model()
    user = make_user()
    fund(user, 10_000_000)
    client = client_for(user)
    path = f"/api/v1/{product}"

    first = client.post(path, body(False), format="json", HTTP_IDEMPOTENCY_KEY="k1")
    again = client.post(path, body(False), format="json", HTTP_IDEMPOTENCY_KEY="k1")
    other = client.post(path, body(True), format="json", HTTP_IDEMPOTENCY_KEY="k1")

    assert (first.status_code, again.status_code) == (202, 202), first.content
    assert again.json()["id"] == first.json()["id"]
    assert (other.status_code, other.json()["code"]) == (409, "idempotency_conflict")
    assert made() == [first.json()["id"]]


@pytest.mark.parametrize("product", sorted(PRODUCTS))
def test_an_account_on_hold_is_refused_an_order_of_every_product_and_nothing_is_made(
    db, client_for, product
):
    made, body = PRODUCTS[product]
    _seed_catalog()
    make_public_model()
    user = make_user()
    fund(user, 10_000_000)
    hold_place(tenant_id=user.tenant_id, key="dispute:dp_orders", reason="test")

    refused = client_for(user).post(f"/api/v1/{product}", body(False), format="json")

    assert (refused.status_code, refused.json()["code"]) == (403, "account_on_hold")
    assert made() == []
    assert not Holding.objects.exists()


def test_without_a_key_there_is_no_earlier_order(db):
    user = make_user()
    make_cluster(user)
    key = OrderKey(tenant_id=user.tenant_id, idempotency_key="", request_hash="x")
    assert ordered_before(Cluster.objects.all(), key, "cluster") is None


def _twin(cluster: Cluster) -> Cluster:
    """A second row under the cluster's key: what a concurrent order would insert."""
    twin = Cluster.objects.get(pk=cluster.pk)
    twin.pk = None
    twin.save(force_insert=True)
    return twin


def test_an_order_that_loses_the_race_for_its_key_answers_the_winner(db):
    user = make_user()
    winner = make_cluster(user, idempotency_key="k1")
    key = OrderKey(user.tenant_id, "k1", winner.request_hash)

    found, created = order_commit(Cluster.objects.all(), key, "cluster", lambda: _twin(winner))

    assert (found.pk, created) == (winner.pk, False)
    assert Cluster.objects.count() == 1


def test_a_losing_order_of_another_request_is_a_409_and_one_without_a_key_raises(db):
    user = make_user()
    winner = make_cluster(user, idempotency_key="k1")
    with pytest.raises(IdempotencyConflict):
        order_commit(
            Cluster.objects.all(),
            OrderKey(user.tenant_id, "k1", "another request"),
            "cluster",
            lambda: _twin(winner),
        )
    with pytest.raises(IntegrityError):
        order_commit(
            Cluster.objects.all(),
            OrderKey(user.tenant_id, "", winner.request_hash),
            "cluster",
            lambda: _twin(winner),
        )
    assert Cluster.objects.count() == 1


def test_an_orders_own_cost_is_an_hour_of_its_units_or_a_month_and_nothing_paid(db):
    _seed_catalog()
    node = Offering.objects.get(name=WHOLE_NODE)
    assert node.price_per_month_fen is not None
    order = Order(product="cluster", tenant_id="t", created_by_id="u", offering=node, gpus=16)
    assert order.own_fen == node.price_per_hour_fen
    assert replace(order, units=3).own_fen == 3 * node.price_per_hour_fen
    monthly = replace(order, units=2, billing="monthly")
    assert monthly.own_fen == 2 * node.price_per_month_fen
    assert replace(monthly, paid=True).own_fen == 0
