"""The platform talks to the cluster the way a controller does (STYLE rule 16): a provisioning
creates the instance's objects once and then, while the pod is pending, only reads the pod (one
GET a poll, its events every few seconds); the reconcile loop lists each kind once a tenant
namespace. Counted at the client, request by request, against the local cluster."""

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from instances.lifecycle import instance_order, instance_stop
from instances.provisioning import converge
from instances.provisioning.reconcile import reconcile
from starverse.core import kube
from tests.factories import converge_until, fund, make_user

NS = "/api/v1/namespaces/{namespace}"
# HTTPRoutes (the gateway's routes) go through the client's custom-objects API.
CUSTOM = "/apis/{group}/{version}/namespaces/{namespace}/{plural}"
POD = ("GET", NS + "/pods/{name}")
EVENTS = ("GET", NS + "/events")


@pytest.fixture
def kube_calls(cluster, monkeypatch):
    """Every request the platform sends to the cluster, as (method, path template)."""
    calls: list[tuple[str, str]] = []
    api_client = kube._api_client(settings.KUBECONFIG)
    send = api_client.call_api

    def counted(resource_path, method, *args, **kwargs):
        calls.append((method, resource_path))
        return send(resource_path, method, *args, **kwargs)

    monkeypatch.setattr(api_client, "call_api", counted)
    return calls


class Clock:
    def __init__(self):
        self.now = timezone.now()

    def advance(self, seconds):
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch):
    """timezone.now() moved by the test, not by the wall clock."""
    clock = Clock()
    monkeypatch.setattr(timezone, "now", lambda: clock.now)
    return clock


def _ordered(catalog):
    user = make_user()
    fund(user, 100_000)
    instance, _ = instance_order(
        user=user, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1"
    )
    return instance


def test_a_pending_instance_costs_one_read_a_poll(catalog, cluster, kube_calls, clock):
    cluster.set_pull_delay(3600)  # the image pull outlasts the test: the pod stays Pending
    instance = _ordered(catalog)
    with pytest.raises(converge.StillPending):
        converge.provision(instance.id)
    first = Counter(kube_calls)
    kube_calls.clear()

    polls = 60 // settings.PROVISIONING_POLL_S  # a minute of waiting
    for _ in range(polls):
        clock.advance(settings.PROVISIONING_POLL_S)
        with pytest.raises(converge.StillPending):
            converge.provision(instance.id)

    print(f"first pass {sum(first.values())} calls; then {len(kube_calls)} a minute")
    assert Counter(kube_calls) == {POD: 60, EVENTS: 12}
    assert first == {
        # the tenant's namespace, bindings and policies are read first (they exist for every
        # instance but a new tenant's first; kube.ensure's read_first): not there yet here
        ("GET", "/api/v1/namespaces/{name}"): 1,
        ("GET", "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/{name}"): 2,
        ("GET", "/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{name}"): 2,
        ("POST", "/api/v1/namespaces"): 1,
        # the worker's binding and the terminal service's
        ("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings"): 2,
        (
            "POST",
            "/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies",
        ): 2,  # the tenant policy, and the one that lets the gateway reach endpoints
        ("POST", NS + "/secrets"): 1,
        ("POST", NS + "/persistentvolumeclaims"): 2,  # the instance's disk and system disk
        ("POST", NS + "/pods"): 1,
        ("POST", NS + "/services"): 2,  # SSH's, and Jupyter's behind the gateway
        ("POST", CUSTOM): 1,  # Jupyter's gateway route
        POD: 1,
        EVENTS: 1,
    }


def test_a_stop_asks_once_and_then_watches_the_pod_go(catalog, cluster, kube_calls):
    instance = _ordered(catalog)
    converge_until(converge.provision, instance.id)
    cluster.kubelet.termination_s = 0.2  # the pod takes a few polls to go
    instance_stop(instance_id=instance.id)
    kube_calls.clear()

    assert converge_until(converge.stop, instance.id) == "stopped"

    calls = Counter(kube_calls)
    assert calls[("DELETE", NS + "/pods/{name}")] == 1
    assert calls[POD] > 2
    assert calls[EVENTS] == 1  # its last events (Killing), once it is gone
    assert set(calls) == {("DELETE", NS + "/pods/{name}"), POD, EVENTS}


def test_the_reconcile_loop_lists_each_kind_once_per_tenant_namespace(catalog, kube_calls):
    """The worker may list only inside tenant namespaces (docs/operator-guide.md "Cluster
    credentials"): one list of the platform's namespaces, one list of each kind in each namespace
    with live rows, and the warnings of the whole cluster."""
    for _ in range(3):
        converge_until(converge.provision, _ordered(catalog).id)
    idle = make_user()  # a tenant with nothing live: its namespace costs nothing
    kube.tenant_namespace_ensure(idle.tenant_id)
    kube_calls.clear()

    report = reconcile()

    assert (report.recreated, report.requeued, report.orphans) == ([], [], [])
    assert Counter(kube_calls) == {
        ("GET", "/api/v1/namespaces"): 1,
        ("GET", NS + "/pods"): 3,
        ("GET", NS + "/services"): 3,
        ("GET", NS + "/secrets"): 3,
        ("GET", NS + "/persistentvolumeclaims"): 3,
        ("GET", CUSTOM): 3,  # the gateway's routes
        ("GET", "/api/v1/events"): 1,
    }


def test_an_unchanged_secret_is_not_replaced_and_a_changed_one_is(cluster, kube_calls):
    """A Secret read back (base64 data) is compared with the rendered one (stringData): many
    ranks ensuring their cluster's shared Secret at once must not each replace it (each
    replace after the first would meet a conflict and a retry)."""
    data = {"known_hosts": "clu-x-0.clu-x ssh-ed25519 AAAA\n", "note": "你好"}
    secret: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": "same-secret", "namespace": "default", "labels": dict(kube.MANAGED)},
        "stringData": data,
    }
    first = kube.ensure(secret, update=True)
    again = kube.ensure(secret, update=True)
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert ("PUT", NS + "/secrets/{name}") not in kube_calls

    changed = {**secret, "stringData": {**data, "note": "changed"}}
    replaced = kube.ensure(changed, update=True)
    assert replaced["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    assert kube_calls.count(("PUT", NS + "/secrets/{name}")) == 1


def test_a_replace_meeting_a_status_write_reads_again_and_goes_through(cluster, monkeypatch):
    """KEDA writes an HTTPScaledObject's status (as the DaemonSet and Deployment controllers
    write theirs), which moves its resourceVersion between our read and our replace: the
    replace meets 409, reads the object again and goes through, instead of failing the pass
    that scaled an endpoint to zero."""
    group, version, plural = kube.CUSTOM_KINDS["HTTPScaledObject"]
    scaled: dict[str, Any] = {
        "apiVersion": f"{group}/{version}",
        "kind": "HTTPScaledObject",
        "metadata": {"name": "ep-raced", "namespace": "default", "labels": dict(kube.MANAGED)},
        "spec": {
            "hosts": ["ep-raced.example"],
            "scaleTargetRef": {"name": "ep-raced", "service": "ep-raced", "port": 8000},
            "replicas": {"min": 1, "max": 2},
        },
    }
    kube.ensure(scaled)
    api_client = kube._api_client(settings.KUBECONFIG)
    send = api_client.call_api
    puts: list[str] = []

    def keda_writes_first(resource_path, method, *args, **kwargs):
        if method == "PUT" and resource_path.endswith("/{plural}/{name}") and not puts:
            puts.append("raced")
            kube._custom().patch_namespaced_custom_object_status(
                group,
                version,
                "default",
                plural,
                "ep-raced",
                {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            )
        return send(resource_path, method, *args, **kwargs)

    monkeypatch.setattr(api_client, "call_api", keda_writes_first)
    to_zero = {**scaled, "spec": {**scaled["spec"], "replicas": {"min": 0, "max": 0}}}
    replaced = kube.ensure(to_zero, update=True)

    assert puts == ["raced"]
    assert replaced["spec"]["replicas"] == {"min": 0, "max": 0}
    stored = kube.read("HTTPScaledObject", "default", "ep-raced")
    assert stored is not None
    assert stored["spec"]["replicas"] == {"min": 0, "max": 0}
