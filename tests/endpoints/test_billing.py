"""What endpoints cost and what happens when the balance runs out: a crashed replica is
restarted and shown, its not-ready time unbilled; an endpoint whose balance cannot pay its
next minute scales to zero, keeping its settings, instead of being deleted; the runway notices
count what endpoints burn."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import LedgerTransaction
from billing.selectors import wallet_for_tenant
from compute.metering import meter_close, meter_tick
from compute.selectors import pending_drifts
from endpoints import manifests
from endpoints.models import Endpoint, EndpointReplica
from endpoints.provisioning import endpoint_converge
from endpoints.scheduler import SyncResult, _follow, endpoints_sync
from endpoints.selectors import endpoint_spend_per_hour_fen
from endpoints.services import endpoint_change
from starverse.core import kube
from starverse.core.errors import InsufficientBalance
from tests.factories import fund, make_endpoint, make_user, read_existing


def _until(condition, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        endpoints_sync()
        time.sleep(0.02)


def _serving(endpoint):
    endpoint_converge(endpoint.id)
    endpoint.refresh_from_db()
    _until(lambda: Endpoint.objects.get(pk=endpoint.pk).status == "running")
    endpoint.refresh_from_db()
    return endpoint


def test_a_crashed_replica_is_restarted_and_shown(catalog, cluster):
    endpoint = _serving(make_endpoint(make_user(), min_replicas=1, max_replicas=1))
    replica = EndpointReplica.objects.get(endpoint=endpoint)
    cluster.crash_container(endpoint.k8s_namespace, replica.pod_name)
    _until(lambda: Endpoint.objects.get(pk=endpoint.pk).restarts == 1)
    _until(lambda: EndpointReplica.objects.get(pk=replica.pk).ready_since is not None)
    replica.refresh_from_db()
    assert replica.restarts == 1
    assert Endpoint.objects.get(pk=endpoint.pk).status == "running"


def test_an_endpoint_that_runs_out_of_balance_scales_to_zero_and_keeps_its_settings(catalog):
    user = make_user()
    endpoint = _serving(make_endpoint(user, min_replicas=1, max_replicas=2))
    assert endpoint_spend_per_hour_fen() == {user.tenant_id: endpoint.offering.price_per_hour_fen}
    wallet = wallet_for_tenant(user.tenant_id)
    have = wallet.cash_fen  # replicas are paid from cash (trial credit pays instances only)
    # far enough ahead that the minutes cost more than the balance holds
    minutes = have * 60 // endpoint.offering.price_per_hour_fen + 5
    result = meter_tick(now=timezone.now() + timedelta(minutes=minutes))
    assert result.short == {"replica": [endpoint.id]}
    drained = wallet_for_tenant(user.tenant_id)
    assert drained.cash_free_fen == 0 and drained.promo_free_fen == wallet.promo_fen
    endpoint.refresh_from_db()
    assert endpoint.suspended is True
    assert endpoint.status == "scaled_to_zero"
    assert (endpoint.min_replicas, endpoint.max_replicas) == (1, 2)  # kept
    assert endpoint.cost_fen == have
    endpoint_converge(endpoint.id)
    name = manifests.object_name(endpoint.id)
    assert read_existing("HTTPScaledObject", endpoint.k8s_namespace, name)["spec"]["replicas"] == {
        "min": 0,
        "max": 0,
    }
    assert read_existing("Deployment", endpoint.k8s_namespace, name)["spec"]["replicas"] == 0
    _until(lambda: not kube.pods_labelled([endpoint.k8s_namespace], manifests.selector(endpoint)))
    _until(lambda: not EndpointReplica.objects.filter(endpoint=endpoint, gone_at__isnull=True))

    # scaling it up again needs an hour on the balance
    with pytest.raises(InsufficientBalance):
        endpoint_change(endpoint=endpoint, min_replicas=1)
    assert Endpoint.objects.get(pk=endpoint.pk).suspended is True
    fund(user, endpoint.offering.price_per_hour_fen * 2, key="again")
    endpoint_change(endpoint=endpoint, min_replicas=1)
    endpoint.refresh_from_db()
    assert endpoint.suspended is False
    endpoint_converge(endpoint.id)
    assert read_existing("HTTPScaledObject", endpoint.k8s_namespace, name)["spec"]["replicas"] == {
        "min": 1,
        "max": 2,
    }


def test_two_passes_that_both_saw_a_replica_become_ready_open_one_session(catalog):
    """The chaos drill (tests/chaos) found a wallet's pending usage 37 fen above its holdings':
    two scheduler passes ran at once (beat's every-second pass, a backlog after a worker was
    killed), both read the replica not yet Ready, and both opened its billing session; the
    second's open closed the first (its started minute posted) and opened the same session
    again, so the minute was accrued twice and posted once. A pass that finds the replica
    already moved on by another leaves it as it is."""
    endpoint = _serving(make_endpoint(make_user(), min_replicas=1, max_replicas=1))
    replica = EndpointReplica.objects.get(endpoint=endpoint)
    assert replica.session == 1 and replica.ready_since is not None
    pod = read_existing("Pod", endpoint.k8s_namespace, replica.pod_name)
    # the other pass's row, read before this pass committed: not Ready yet, no session
    stale = EndpointReplica.objects.get(pk=replica.pk)
    stale.ready_since, stale.session = None, 0
    _follow(endpoint, stale, pod, True, timezone.now(), SyncResult())

    meter_close(replica.id, now=replica.ready_since + timedelta(seconds=90))
    keys = LedgerTransaction.objects.filter(
        idempotency_key__startswith=f"endpoint:{replica.id}:"
    ).values_list("idempotency_key", flat=True)
    assert list(keys) == [f"endpoint:{replica.id}:1:1-2"]
    assert pending_drifts() == []
