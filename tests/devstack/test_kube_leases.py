"""Node Leases (kube-node-lease) as the kubelet keeps them: each running kubelet renews its
node's Lease every leaseDurationSeconds / 4 (10 s); a kubelet that stops (lose_node) renews it
no more and its node's Ready condition goes Unknown. The platform's node-loss watch relies on
both (fleet.liveness)."""

from collections.abc import Iterator
from datetime import datetime

import pytest
from kubernetes import client, config, watch

from devstack.kube import KubeEmulator

NODE = "gpu-h100-1"
LEASE_NS = "kube-node-lease"


@pytest.fixture
def leases(emu: KubeEmulator, kubeconfig: str) -> Iterator[client.CoordinationV1Api]:
    api_client = config.new_client_from_config(config_file=kubeconfig)
    yield client.CoordinationV1Api(api_client)
    api_client.close()


def _renewed(leases: client.CoordinationV1Api, node: str) -> datetime:
    return leases.read_namespaced_lease(node, LEASE_NS).spec.renew_time


def _ready(core: client.CoreV1Api, node: str) -> str:
    conditions = core.read_node(node).status.conditions
    return next(c.status for c in conditions if c.type == "Ready")


def test_a_running_kubelet_renews_its_lease_every_ten_seconds_a_stopped_one_never(
    emu: KubeEmulator, leases: client.CoordinationV1Api, api: client.CoreV1Api
) -> None:
    with emu.paused():
        emu.step(0)
        first = _renewed(leases, NODE)
        emu.step(9)
        assert _renewed(leases, NODE) == first  # not due yet
        emu.step(1)
        second = _renewed(leases, NODE)
        assert second > first
        assert _ready(api, NODE) == "True"

        emu.lose_node(NODE)
        other = _renewed(leases, "gpu-h100-0")
        emu.step(10)
        emu.step(10)
        assert _renewed(leases, NODE) == second
        assert _renewed(leases, "gpu-h100-0") > other
        assert _ready(api, NODE) == "Unknown"

        emu.restore_node(NODE)
        emu.step(0)
        assert _renewed(leases, NODE) > second
        assert _ready(api, NODE) == "True"


def test_one_watch_on_the_lease_namespace_sees_every_renewal_but_the_lost_nodes(
    emu: KubeEmulator, leases: client.CoordinationV1Api
) -> None:
    with emu.paused():
        emu.step(0)
        emu.lose_node(NODE)
        version = leases.list_namespaced_lease(LEASE_NS).metadata.resource_version
        emu.step(10)
    renewed = set()
    for event in watch.Watch().stream(
        leases.list_namespaced_lease, LEASE_NS, resource_version=version, timeout_seconds=1
    ):
        assert event["type"] == "MODIFIED"
        renewed.add(event["object"].metadata.name)
    nodes = {lease.metadata.name for lease in leases.list_namespaced_lease(LEASE_NS).items}
    assert renewed == nodes - {NODE}
    assert NODE in nodes
