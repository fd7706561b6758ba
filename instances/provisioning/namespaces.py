"""Tenant namespaces kept in step with the platform's policy. A namespace, the worker's and the
terminal service's RoleBindings in it and its NetworkPolicy are created once, but the policy
they carry changes with a release (new Pod Security labels) or with the operator's settings
(GATEWAY_CIDR and the cluster ranges the egress rule leaves out). Each provisioning brings its
tenant's up to date (a cluster's ranks once a round: the first to start; clusters.ranks); this
periodic sweep brings every tenant namespace up to date, including those of tenants who start
nothing.

The sweep is paced for a production API server: one list of the platform's namespaces, then
calls only where a namespace's policy fingerprint (an annotation written once it is up to
date) differs from the policy rendered now, at most TENANT_SWEEP_CALLS_PER_S a second and for
at most SWEEP_BUDGET_S a run; what is left waits for the next run. Labels others put on a
namespace or a policy are never touched."""

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models.functions import Lower

from instances.choices import InstanceStatus
from instances.models import Instance
from instances.provisioning import manifests
from starverse.core import kube

logger = logging.getLogger(__name__)
FINGERPRINT = "starverse.io/policy-fingerprint"
# The calls converging one namespace takes at most: create/read/replace of each of the two
# bindings and of the two policies, namespace patch.
CALLS_PER_NAMESPACE = 13
# A run stops in time for the next one (beat sends it every 300 s).
SWEEP_BUDGET_S = 240.0


def _tenant_key(tenant: str) -> str:
    """A tenant's id in lower case, from the id or from its label (which only lower-cases it
    and turns "_" into "-"; the id's random part has neither)."""
    return tenant.lower().replace("-", "_")


def http_ports_by_tenant(tenant: str | None = None) -> dict[str, list[int]]:
    """The HTTP ports the instances of each tenant declare (instances.gateway), that are not
    terminated, by lower-cased tenant id: what the tenant's NetworkPolicy lets the gateway
    reach. One query, for one tenant or for all."""
    rows = Instance.objects.exclude(status=InstanceStatus.TERMINATED).exclude(ports=[])
    if tenant is not None:
        rows = rows.alias(tenant_lower=Lower("tenant_id")).filter(tenant_lower=_tenant_key(tenant))
    found: dict[str, set[int]] = {}
    for tenant_id, ports in rows.values_list("tenant_id", "ports"):
        found.setdefault(tenant_id.lower(), set()).update(ports or [])
    return {key: sorted(ports) for key, ports in found.items()}


def _http_ports(tenant: str, known: dict[str, list[int]] | None) -> list[int]:
    by_tenant = known if known is not None else http_ports_by_tenant(tenant)
    return by_tenant.get(_tenant_key(tenant), [])


def policy_fingerprint(tenant: str, http_ports: dict[str, list[int]] | None = None) -> str:
    """A digest of everything the platform renders for a tenant namespace: its labels, the
    worker's and the terminal service's RoleBindings and the NetworkPolicy (with the ports its
    instances declare, read here unless given as `http_ports`, by tenant)."""
    binding = kube.tenant_binding(tenant)
    exec_binding = kube.tenant_exec_binding(tenant)
    policy = manifests.network_policy(tenant, _http_ports(tenant, http_ports))
    endpoint_policy = manifests.endpoint_network_policy(tenant)
    rendered = {
        "namespace": kube.namespace(tenant)["metadata"]["labels"],
        "binding": [binding["metadata"]["labels"], binding["roleRef"], binding["subjects"]],
        "exec_binding": [
            exec_binding["metadata"]["labels"],
            exec_binding["roleRef"],
            exec_binding["subjects"],
        ],
        "policy": [policy["metadata"]["labels"], policy["spec"]],
        "endpoint_policy": [endpoint_policy["metadata"]["labels"], endpoint_policy["spec"]],
    }
    digest = hashlib.sha256(json.dumps(rendered, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def tenant_policy_converge(tenant: str, http_ports: dict[str, list[int]] | None = None) -> None:
    """Bring one tenant's namespace labels, RoleBindings and NetworkPolicies (the isolation and
    the endpoints' ingress) to what the platform renders now (each read, compared, and
    replaced only if it differs)."""
    kube.tenant_namespace_ensure(tenant)
    policy = manifests.network_policy(tenant, _http_ports(tenant, http_ports))
    kube.ensure(policy, update=True, read_first=True)
    kube.ensure(manifests.endpoint_network_policy(tenant), update=True, read_first=True)


def tenant_network_policy_converge(tenant: str) -> None:
    """Only the tenant's NetworkPolicy (its instances' declared ports changed)."""
    kube.ensure(manifests.network_policy(tenant, _http_ports(tenant, None)), update=True)


@dataclass
class SweepReport:
    namespaces: int = 0
    updated: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    left: int = 0  # out of time: the next run takes them


def tenant_namespaces_sweep(
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> SweepReport:
    """One run over every tenant namespace: those whose fingerprint or labels are out of date
    are converged, paced, within the run's time budget."""
    report = SweepReport()
    interval = CALLS_PER_NAMESPACE / max(settings.TENANT_SWEEP_CALLS_PER_S, 1)
    started = next_at = clock()
    stale = []
    http_ports = http_ports_by_tenant()
    for item in kube.tenant_namespaces():
        report.namespaces += 1
        if _stale(item, http_ports):
            stale.append(item)
    for index, item in enumerate(stale):
        name = item["metadata"]["name"]
        if clock() - started > SWEEP_BUDGET_S:
            report.left = len(stale) - index
            break
        sleep(max(0.0, next_at - clock()))
        next_at = clock() + interval
        # The manifests depend on a tenant only through tenant_label (sv-<label>), which gives
        # back a label unchanged: rendered from the namespace's label, they are the tenant's.
        tenant = item["metadata"]["labels"]["starverse.io/tenant"]
        try:
            tenant_policy_converge(tenant, http_ports)
            fingerprint = policy_fingerprint(tenant, http_ports)
            kube.namespace_patch(name, {"metadata": {"annotations": {FINGERPRINT: fingerprint}}})
        except kube.KubeError as error:
            logger.error("tenant_namespace.converge_failed namespace=%s error=%s", name, error)
            report.failed.append(name)
            continue
        report.updated.append(name)
    if report.updated or report.failed or report.left:
        logger.info(
            "tenant_namespaces.swept namespaces=%d updated=%d failed=%d left=%d",
            report.namespaces,
            len(report.updated),
            len(report.failed),
            report.left,
        )
    return report


def _stale(item: dict[str, Any], http_ports: dict[str, list[int]]) -> bool:
    meta = item.get("metadata") or {}
    labels = meta.get("labels") or {}
    tenant = labels.get("starverse.io/tenant")
    if not tenant or meta.get("name") != kube.namespace_name(tenant):
        return False  # not a tenant namespace (or not one we named)
    if (meta.get("annotations") or {}).get(FINGERPRINT) != policy_fingerprint(tenant, http_ports):
        return True
    return bool(kube.owned_label_drift(kube.namespace(tenant)["metadata"]["labels"], labels))
