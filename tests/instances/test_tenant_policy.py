"""Tenant namespaces and their NetworkPolicies follow the platform's policy after they exist:
an operator's new GATEWAY_CIDR or cluster ranges, new Pod Security labels of a release, reach
existing namespaces on the next provisioning of the tenant and on the periodic sweep, and labels
that others put on them survive. Against the local cluster."""

from collections import Counter

import pytest
from django.conf import settings as django_settings

from instances.provisioning import manifests
from instances.provisioning.namespaces import (
    FINGERPRINT,
    policy_fingerprint,
    tenant_namespaces_sweep,
)
from instances.tasks import converge_tenant_namespaces
from starverse.core import kube
from tests.factories import make_instance, make_user, read_existing

FOREIGN = {"team.example.com/owner": "research", "policy.example.com/audited": "yes"}


@pytest.fixture
def kube_calls(cluster, monkeypatch):
    """Every request the platform sends to the cluster, as (method, path template)."""
    calls: list[tuple[str, str]] = []
    api_client = kube._api_client(django_settings.KUBECONFIG)
    send = api_client.call_api

    def counted(resource_path, method, *args, **kwargs):
        calls.append((method, resource_path))
        return send(resource_path, method, *args, **kwargs)

    monkeypatch.setattr(api_client, "call_api", counted)
    return calls


def _policy(namespace):
    return read_existing("NetworkPolicy", namespace, "tenant-isolation")


def _gateway(policy):
    return [
        peer["ipBlock"]["cidr"]
        for rule in policy["spec"]["ingress"]
        if "ports" in rule
        for peer in rule["from"]
    ]


def _internet_except(policy):
    return next(
        peer["ipBlock"]["except"]
        for rule in policy["spec"]["egress"]
        for peer in rule["to"]
        if "ipBlock" in peer
    )


def _label_foreign(namespace):
    kube.namespace_patch(namespace, {"metadata": {"labels": FOREIGN}})


def test_a_new_gateway_range_reaches_existing_policies_on_the_sweep(catalog, cluster, settings):
    settings.GATEWAY_CIDR = ["192.0.2.0/24"]
    settings.TENANT_SWEEP_CALLS_PER_S = 1000
    instance = make_instance(make_user(), status="running")
    namespace = instance.k8s_namespace
    _label_foreign(namespace)
    assert _gateway(_policy(namespace)) == ["192.0.2.0/24"]

    settings.GATEWAY_CIDR = ["198.51.100.0/24", "203.0.113.0/28"]
    settings.KUBE_API_CIDR = ["203.0.113.99/32"]
    converge_tenant_namespaces()

    policy = _policy(namespace)
    assert _gateway(policy) == ["198.51.100.0/24", "203.0.113.0/28"]
    assert "203.0.113.99/32" in _internet_except(policy)
    labels = read_existing("Namespace", None, namespace)["metadata"]["labels"]
    assert {k: labels[k] for k in FOREIGN} == FOREIGN
    annotations = read_existing("Namespace", None, namespace)["metadata"]["annotations"]
    assert annotations[FINGERPRINT] == policy_fingerprint(instance.tenant_id)


def test_an_up_to_date_sweep_costs_one_list(catalog, cluster, settings, kube_calls):
    settings.TENANT_SWEEP_CALLS_PER_S = 1000
    make_instance(make_user(), status="running")
    first = tenant_namespaces_sweep()
    assert len(first.updated) == 1
    kube_calls.clear()

    again = tenant_namespaces_sweep()

    assert (again.namespaces, again.updated, again.failed) == (1, [], [])
    assert Counter(kube_calls) == {("GET", "/api/v1/namespaces"): 1}


def test_pod_security_labels_reach_a_namespace_made_by_an_older_release(catalog, cluster, settings):
    """A namespace from before Pod Security labels (and with a level we no longer set) gets
    ours merged in by the tenant's next provisioning; others' labels stay."""
    settings.PUBLIC_POOL_SOURCE = "nfs://pool.internal/public"
    user = make_user()
    old = kube.namespace(user.tenant_id)
    labels = old["metadata"]["labels"]
    old["metadata"]["labels"] = {
        **{k: v for k, v in labels.items() if not k.startswith("pod-security")},
        "pod-security.kubernetes.io/enforce": "privileged",
        "pod-security.kubernetes.io/enforce-version": "v1.24",
        "pod-security.kubernetes.io/audit-version": "v1.24",
        **FOREIGN,
    }
    kube.ensure(old)

    instance = make_instance(user, status="running")

    have = read_existing("Namespace", None, instance.k8s_namespace)["metadata"]["labels"]
    assert have == {**labels, **FOREIGN, "kubernetes.io/metadata.name": instance.k8s_namespace}
    assert "pod-security.kubernetes.io/audit-version" not in have  # ours, no longer wanted
    assert have["pod-security.kubernetes.io/enforce"] == "baseline"


def test_a_policy_changed_by_hand_is_put_back_by_the_next_provisioning(catalog, cluster):
    user = make_user()
    first = make_instance(user, status="running")
    namespace = first.k8s_namespace
    policy = _policy(namespace)
    policy["spec"] = {"podSelector": {}, "ingress": [{}], "egress": [{}]}  # allow everything
    policy["metadata"]["labels"].update(FOREIGN)
    kube._networking().replace_namespaced_network_policy("tenant-isolation", namespace, policy)

    make_instance(user, status="running")

    restored = _policy(namespace)
    assert restored["spec"] == manifests.network_policy(user.tenant_id)["spec"]
    assert {k: restored["metadata"]["labels"][k] for k in FOREIGN} == FOREIGN


def test_the_tenant_binding_follows_the_worker_service_account(catalog, cluster, settings):
    user = make_user()
    instance = make_instance(user, status="running")
    binding = read_existing("RoleBinding", instance.k8s_namespace, "starverse-tenant")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "starverse-tenant",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "starverse-worker", "namespace": "starverse-system"}
    ]

    settings.KUBE_WORKER_SERVICE_ACCOUNT = "platform/sv-worker"
    settings.TENANT_SWEEP_CALLS_PER_S = 1000
    assert tenant_namespaces_sweep().updated == [instance.k8s_namespace]

    binding = read_existing("RoleBinding", instance.k8s_namespace, "starverse-tenant")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sv-worker", "namespace": "platform"}
    ]


def test_the_terminal_binding_follows_the_terminal_service_account(catalog, cluster, settings):
    user = make_user()
    instance = make_instance(user, status="running")
    binding = read_existing("RoleBinding", instance.k8s_namespace, "starverse-exec")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "starverse-exec",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "starverse-terminal", "namespace": "starverse-system"}
    ]

    settings.KUBE_TERMINAL_SERVICE_ACCOUNT = "platform/sv-terminal"
    settings.TENANT_SWEEP_CALLS_PER_S = 1000
    assert tenant_namespaces_sweep().updated == [instance.k8s_namespace]

    binding = read_existing("RoleBinding", instance.k8s_namespace, "starverse-exec")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sv-terminal", "namespace": "platform"}
    ]
    worker = read_existing("RoleBinding", instance.k8s_namespace, "starverse-tenant")
    assert worker["subjects"][0]["name"] == "starverse-worker"


def test_a_second_provisioning_replaces_nothing_that_is_up_to_date(catalog, cluster, kube_calls):
    user = make_user()
    make_instance(user, status="running")
    kube_calls.clear()

    make_instance(user, status="running")

    writes = [(m, path) for m, path in kube_calls if m in ("PUT", "PATCH")]
    assert writes == []  # namespace, binding and policy read, compared and left alone


def test_rendering_from_a_namespace_label_gives_the_tenants_own_objects(db):
    tenant = make_user().tenant_id
    label = kube.tenant_label(tenant)

    assert kube.namespace(label) == kube.namespace(tenant)
    assert kube.tenant_binding(label) == kube.tenant_binding(tenant)
    assert kube.tenant_exec_binding(label) == kube.tenant_exec_binding(tenant)
    assert manifests.network_policy(label) == manifests.network_policy(tenant)


class _Clock:
    """The sweep's monotonic clock, moved only by its sleeps."""

    def __init__(self):
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def test_the_sweep_is_paced_and_stops_at_its_budget(catalog, cluster, settings, monkeypatch):
    from instances.provisioning import namespaces

    for _ in range(4):
        kube.tenant_namespace_ensure(make_user().tenant_id)
    settings.TENANT_SWEEP_CALLS_PER_S = 13  # a namespace takes at most 13 calls: one a second
    monkeypatch.setattr(namespaces, "SWEEP_BUDGET_S", 1.5)
    clock = _Clock()

    report = tenant_namespaces_sweep(clock=clock, sleep=clock.sleep)

    assert clock.slept == [0.0, 1.0, 1.0]
    assert (report.namespaces, len(report.updated), report.left) == (4, 3, 1)
    again = tenant_namespaces_sweep(clock=_Clock(), sleep=lambda seconds: None)
    assert (len(again.updated), again.left) == (1, 0)  # the rest, on the next run
