"""Tenant pods are hardened for a multi-tenant GPU host: seccomp, no privilege escalation,
capabilities dropped to a named few, an ephemeral-storage limit, an optional runtime class,
Pod Security labels on the namespace, and a NetworkPolicy that denies by default both ways."""

import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

import starverse.settings.base
from compute.models import Offering
from instances.provisioning import manifests
from starverse.core import kube
from tests.factories import make_instance, make_user

BASE = Path(starverse.settings.base.__file__)
SAFE_CAPS = {
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "SETUID",
    "SETGID",
    "KILL",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "AUDIT_WRITE",
}


def _assert_hardened(pod, ephemeral="50Gi"):
    spec = pod["spec"]
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = spec["containers"][0]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["privileged"] is False
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert context["capabilities"]["drop"] == ["ALL"]
    assert set(context["capabilities"]["add"]) == SAFE_CAPS
    assert container["resources"]["limits"]["ephemeral-storage"] == ephemeral
    assert container["resources"]["requests"]["ephemeral-storage"] == ephemeral


def _assert_isolating(policy, gateway):
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["podSelector"] == {}
    # ingress: the tenant's own pods, and SSH/Jupyter only from the gateway
    assert {"from": [{"podSelector": {}}]} in spec["ingress"]
    outside = [rule for rule in spec["ingress"] if "ports" in rule]
    assert len(outside) == 1
    assert outside[0]["from"] == [{"ipBlock": {"cidr": cidr}} for cidr in gateway]
    assert {(p["port"], p["protocol"]) for p in outside[0]["ports"]} == {
        (22, "TCP"),
        (8888, "TCP"),
    }
    assert all("from" in rule for rule in spec["ingress"])  # never from everywhere
    # egress: own pods, DNS in kube-system, the internet less the cluster and metadata
    egress = spec["egress"]
    dns = [rule for rule in egress if "ports" in rule]
    assert dns[0]["to"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "kube-system"
    }
    assert {(p["port"], p["protocol"]) for p in dns[0]["ports"]} == {(53, "UDP"), (53, "TCP")}
    internet = [peer["ipBlock"] for rule in egress for peer in rule["to"] if "ipBlock" in peer]
    assert len(internet) == 1
    return internet[0]


def test_the_pod_is_hardened(catalog, settings):
    settings.INSTANCE_EPHEMERAL_STORAGE_GB = 80
    instance = make_instance(make_user())

    pod = manifests.pod(instance, "node-1")

    _assert_hardened(pod, "80Gi")
    assert "runtimeClassName" not in pod["spec"]


def test_an_offering_runtime_class_goes_into_the_pod_spec(catalog):
    instance = make_instance(make_user())
    instance.offering.runtime_class = "kata-nvidia"

    assert manifests.pod(instance, "node-1")["spec"]["runtimeClassName"] == "kata-nvidia"


def test_the_network_policy_denies_by_default_both_ways(settings):
    settings.GATEWAY_CIDR = ["192.0.2.0/24"]
    settings.KUBE_API_CIDR = ["203.0.113.10/32"]
    settings.CLUSTER_NODE_CIDR = ["10.0.0.0/16"]

    block = _assert_isolating(manifests.network_policy("ten_abc"), ["192.0.2.0/24"])

    assert block["cidr"] == "0.0.0.0/0"
    assert block["except"] == [
        "169.254.0.0/16",
        "10.244.0.0/16",
        "10.96.0.0/12",
        "203.0.113.10/32",
        "10.0.0.0/16",
    ]


def test_without_a_gateway_nothing_outside_the_tenant_reaches_ssh(settings):
    settings.GATEWAY_CIDR = []

    ingress = manifests.network_policy("ten_abc")["spec"]["ingress"]

    assert ingress == [{"from": [{"podSelector": {}}]}]


def test_tenant_namespaces_carry_pod_security_labels(settings):
    settings.PUBLIC_POOL_SOURCE = "nfs://pool.internal/public"
    labels = kube.namespace("ten_abc")["metadata"]["labels"]

    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"

    settings.PUBLIC_POOL_SOURCE = "hostpath:///srv/starverse/public"  # baseline forbids hostPath
    labels = kube.namespace("ten_abc")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "::/0", "not-a-cidr"])
def test_a_gateway_of_everywhere_is_refused(monkeypatch, cidr):
    monkeypatch.setenv("GATEWAY_CIDR", cidr)
    with pytest.raises(ImproperlyConfigured, match="GATEWAY_CIDR"):
        runpy.run_path(str(BASE))


def test_the_gateway_defaults_to_the_node_range(monkeypatch):
    monkeypatch.delenv("GATEWAY_CIDR", raising=False)
    monkeypatch.setenv("CLUSTER_NODE_CIDR", "10.1.0.0/16")

    values = runpy.run_path(str(BASE))

    assert values["GATEWAY_CIDR"] == ["10.1.0.0/16"]
    assert values["INSTANCE_EPHEMERAL_STORAGE_GB"] == 50


def test_an_order_creates_a_hardened_pod_and_policy_on_the_cluster(catalog, cluster, settings):
    settings.GATEWAY_CIDR = ["192.0.2.0/24"]
    settings.PUBLIC_POOL_SOURCE = "nfs://pool.internal/public"
    Offering.objects.filter(pk=catalog["h100x1"].pk).update(runtime_class="nvidia")
    user = make_user()

    instance = make_instance(user, status="running")

    pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    namespace = kube.read("Namespace", None, instance.k8s_namespace)
    assert pod is not None
    _assert_hardened(pod)
    assert pod["spec"]["runtimeClassName"] == "nvidia"
    assert pod["status"]["phase"] == "Running"
    policy = kube.read("NetworkPolicy", instance.k8s_namespace, "tenant-isolation")
    assert policy is not None and namespace is not None
    assert "169.254.0.0/16" in _assert_isolating(policy, ["192.0.2.0/24"])["except"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"


def test_a_namespace_made_before_pod_security_labels_is_still_ours(catalog, cluster):
    user = make_user()
    old = kube.namespace(user.tenant_id)
    old["metadata"]["labels"] = {
        k: v for k, v in old["metadata"]["labels"].items() if "pod-security" not in k
    }
    kube.ensure(old)

    assert (
        kube.ensure(kube.namespace(user.tenant_id))["metadata"]["name"] == old["metadata"]["name"]
    )
