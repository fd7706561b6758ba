"""/metrics: the platform's numbers in Prometheus's text format, computed from the database
after real orders on the local cluster, and guarded by a token or an address range."""

from datetime import timedelta

import pytest
from celery import shared_task
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from billing.models import StripeEvent
from billing.tasks import audit_wallets
from compute.models import Holding
from fleet.models import Node
from instances.lifecycle import instance_stop
from instances.metering import metering_tick
from instances.models import Instance
from instances.provisioning import converge
from tests.factories import converge_until, fund, make_user

H100 = "NVIDIA H100 80GB HBM3"


def scrape(client, **headers):
    answer = client.get("/metrics", **headers)
    assert answer.status_code == 200, answer.status_code
    assert answer["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(answer.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def open_metrics(settings):
    settings.DEBUG = True
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_CIDRS = []


def _order(client, offering, image):
    answer = client.post(
        "/api/v1/instances", {"offering": offering.id, "image": image.id}, format="json"
    )
    assert answer.status_code == 202, answer.content
    return Instance.objects.get(pk=answer.json()["id"])


def test_metrics_after_real_orders_on_the_local_cluster(
    catalog, client_for, client, open_metrics, settings
):
    settings.MAX_RUNNING_GPUS = 32
    user = make_user()
    fund(user, 1_000_000)
    api = client_for(user)
    small = _order(api, catalog["h100x1"], catalog["image"])
    assert converge_until(converge.provision, small.id) == "running"
    whole = [_order(api, catalog["h100_node"], catalog["image"]) for _ in range(2)]
    assert whole[0].status == "provisioning"  # one whole H100 node is free; the other is queued
    assert whole[1].status == "queued"
    Holding.objects.filter(pk=whole[1].pk).update(queued_at=timezone.now() - timedelta(minutes=7))
    small.refresh_from_db()
    metering_tick(now=small.running_since + timedelta(minutes=3, seconds=1))
    Node.objects.filter(name=small.node.name).update(
        last_report_at=timezone.now() - timedelta(seconds=90)
    )
    StripeEvent.objects.create(id="evt_ok", type="x", payload={}, processed_at=timezone.now())
    StripeEvent.objects.create(id="evt_bad", type="x", payload={}, attempts=3, error="boom")
    StripeEvent.objects.create(id="evt_new", type="x", payload={})

    samples = scrape(client)

    assert value(samples, "starverse_orders_total", gpu_model=H100) == 3
    assert value(samples, "starverse_instances", gpu_model=H100, status="running") == 1
    assert value(samples, "starverse_instances", gpu_model=H100, status="provisioning") == 1
    assert value(samples, "starverse_instance_gpus", gpu_model=H100, status="running") == 1
    assert value(samples, "starverse_queue_length", gpu_model=H100) == 1
    wait = value(samples, "starverse_queue_wait_seconds_max", gpu_model=H100)
    assert 7 * 60 <= wait < 8 * 60
    assert value(samples, "starverse_provisioning_in_progress", gpu_model=H100) == 1
    assert value(samples, "starverse_order_to_running_seconds_count", gpu_model=H100) == 1
    assert 0 <= value(samples, "starverse_order_to_running_seconds_sum", gpu_model=H100) < 30
    # 16 H100s: 1 + 8 allocated; the other node's 7 are free
    assert value(samples, "starverse_fleet_gpus", gpu_model=H100, state="allocated") == 9
    assert value(samples, "starverse_fleet_gpus", gpu_model=H100, state="free") == 7
    assert value(samples, "starverse_fleet_gpus", gpu_model=H100, state="unhealthy") == 0
    assert value(samples, "starverse_fleet_nodes", state="ready") == Node.objects.count()
    lag = value(
        samples,
        "starverse_node_report_lag_seconds",
        node=small.node.name,
        gpu_model=H100,
        state="ready",
    )
    assert 90 <= lag < 120
    # three minutes of the 1× H100 at its hourly price, cumulatively rounded
    price = catalog["h100x1"].price_per_hour_fen
    charged = sum(round(price * m / 60) - round(price * (m - 1) / 60) for m in (1, 2, 3))
    # accrued, not yet posted: the ledger gets them at the hour or the stop
    assert value(samples, "starverse_usage_pending_fen") == charged
    assert value(samples, "starverse_ledger_transactions_total", kind="usage") is None
    instance_stop(instance_id=small.id)
    samples = scrape(client)
    assert value(samples, "starverse_usage_pending_fen") == 0
    assert value(samples, "starverse_ledger_transactions_total", kind="usage") == 1
    assert value(samples, "starverse_ledger_fen_total", kind="usage") == charged
    assert value(samples, "starverse_ledger_fen_total", kind="topup") == 1_000_000
    assert value(samples, "starverse_stripe_events_received_total") == 3
    assert value(samples, "starverse_stripe_event_attempts_total") == 3
    assert value(samples, "starverse_stripe_events", outcome="processed") == 1
    assert value(samples, "starverse_stripe_events", outcome="failing") == 1
    assert value(samples, "starverse_stripe_events", outcome="pending") == 1


def test_failures_are_counted_per_gpu_model(catalog, cluster, client_for, client, open_metrics):
    user = make_user()
    fund(user, 100_000)
    before = value(scrape(client), "starverse_instance_failures_total", gpu_model=H100) or 0
    cluster.fail_image_pull("pytorch")
    instance = _order(client_for(user), catalog["h100x1"], catalog["image"])

    assert converge_until(converge.provision, instance.id) == "failed"

    assert value(scrape(client), "starverse_instance_failures_total", gpu_model=H100) == before + 1


@shared_task(bind=True, max_retries=1, default_retry_delay=0)
def flaky(self):
    if self.request.retries == 0:
        raise self.retry(countdown=0)
    return "done"


@shared_task(bind=True, max_retries=1, default_retry_delay=0)
def erring(self):
    if self.request.retries == 0:
        raise self.retry(countdown=0, exc=ConnectionError("down"))
    return "done"


def test_task_retries_and_the_ledger_audit_are_counted(db, client, open_metrics):
    start = scrape(client)
    waited = value(start, "starverse_task_retries_total", task=flaky.name, cause="wait") or 0
    erred = value(start, "starverse_task_retries_total", task=erring.name, cause="ConnectionError")

    flaky.apply()
    erring.apply()
    audit_wallets()

    samples = scrape(client)
    assert (
        value(samples, "starverse_task_retries_total", task=flaky.name, cause="wait") == waited + 1
    )
    assert (
        value(samples, "starverse_task_retries_total", task=erring.name, cause="ConnectionError")
        == (erred or 0) + 1
    )
    assert value(samples, "starverse_ledger_audit_drifting_wallets") == 0
    assert value(samples, "starverse_ledger_audit_unbalanced_transactions") == 0
    last = value(samples, "starverse_ledger_audit_last_run_timestamp_seconds")
    assert abs(last - timezone.now().timestamp()) < 60


def test_metrics_need_the_token_or_an_allowed_address(db, client, settings):
    settings.DEBUG = False
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_CIDRS = []
    assert client.get("/metrics").status_code == 403  # production without either: closed

    settings.METRICS_TOKEN = "s3cret-scrape-token"
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-scrape-token")

    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_CIDRS = ["10.0.0.0/8"]
    assert client.get("/metrics").status_code == 403  # the test client comes from 127.0.0.1
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    # a kubelet-style Host is no obstacle, as for the probes
    assert (
        client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_HOST="10.1.2.9:8000").status_code == 200
    )
