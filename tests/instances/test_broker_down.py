"""An order is committed before its task is sent: when the broker is down the order still
answers 202, and the reconcile loop sends the lost work once the broker is back."""

from collections.abc import Iterator

import pytest
from django.db import connection
from rest_framework.test import APIClient

from instances.models import Instance
from instances.provisioning import reconcile
from starverse.celery import app
from tests.factories import fund, make_token, make_user


@pytest.fixture
def broker_down() -> Iterator[None]:
    """Celery publishes to a real broker address where nothing listens."""
    saved = (app.conf.task_always_eager, app.conf.broker_url, app.conf.broker_connection_timeout)
    app.conf.update(
        task_always_eager=False,
        broker_url="redis://127.0.0.1:9/0",
        broker_connection_timeout=0.5,
    )
    _forget_connections()
    yield
    eager, url, timeout = saved
    app.conf.update(task_always_eager=eager, broker_url=url, broker_connection_timeout=timeout)
    _forget_connections()


def _forget_connections() -> None:
    # The next publish opens a connection to the broker the configuration names now.
    vars(app)["_pool"] = None
    vars(app.amqp)["_producer_pool"] = None


def test_an_order_answers_202_with_the_broker_down_and_reconcile_serves_it_later(
    transactional_db, catalog, broker_down
):
    user = make_user()
    fund(user, 1_000_000)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(user)[1]}")
    whole_node = catalog["a100_node"]
    body = {"offering": whole_node.id, "image": catalog["image"].id}

    first = client.post("/api/v1/instances", body, format="json")
    second = client.post("/api/v1/instances", body, format="json")  # waits for the same node

    assert (first.status_code, second.status_code) == (202, 202)
    assert Instance.objects.get(pk=second.json()["id"]).status == "queued"

    app.conf.update(task_always_eager=True)  # the broker is back
    assert connection.in_atomic_block is False
    report = reconcile.reconcile()
    assert report.queues == [whole_node.gpu_model.product]
