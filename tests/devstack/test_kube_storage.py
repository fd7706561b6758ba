"""The kube emulator's storage behaviour through the official kubernetes client: volume setup
gating in the kubelet (FailedMount, Multi-Attach), claim expansion and immutability, force
deletion of pods on a lost node and the kubelet Summary API's volume statistics."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.kube import KubeEmulator
from tests.devstack import wait_for

GIB = 2**30
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
NODE_A, NODE_B = "gpu-h100-0", "gpu-h100-1"


def claim_body(name: str, mode: str = "ReadWriteOnce", size: str = "10Gi") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": [mode], "resources": {"requests": {"storage": size}}},
    }


def pod_body(name: str, node: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "tolerations": [TOLERATION],
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def phase(api: client.CoreV1Api, name: str) -> str:
    return str(api.read_namespaced_pod(name, "default").status.phase)


def running(api: client.CoreV1Api, name: str) -> bool:
    return phase(api, name) == "Running"


def events(api: client.CoreV1Api, name: str, reason: str) -> list[client.CoreV1Event]:
    return api.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={name},reason={reason}"
    ).items


def error_of(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


def summary(api: client.CoreV1Api, node: str) -> dict[str, Any]:
    # the generated client turns a str response into str(json.loads(body)), a Python repr:
    # read the raw body instead
    response = api.connect_get_node_proxy_with_path(node, "stats/summary", _preload_content=False)
    return json.loads(response.data)


# --- volume setup gating -----------------------------------------------------------------------


def test_pod_waits_for_a_missing_claim_with_failed_mount_then_runs(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    api.create_namespaced_pod("default", pod_body("early", NODE_A, "later"))
    warning = wait_for(lambda: events(api, "early", "FailedMount"), "FailedMount")[0]
    assert warning.type == "Warning"
    assert warning.source.component == "kubelet"
    assert warning.source.host == NODE_A
    assert warning.message == (
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[]: "
        'persistentvolumeclaim "later" not found'
    )
    with emu.paused():
        for _ in range(30):  # 30 kubelet passes over 0.3 s of retrying
            emu.step(0.01)
    pod = api.read_namespaced_pod("early", "default")
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    ready_to_start = next(c for c in pod.status.conditions if c.type == "PodReadyToStartContainers")
    assert ready_to_start.status == "False"
    repeated = events(api, "early", "FailedMount")
    assert len(repeated) == 1 and repeated[0].count == 1  # not repeated every tick
    assert not events(api, "early", "Pulling")
    api.create_namespaced_persistent_volume_claim("default", claim_body("later"))
    wait_for(lambda: running(api, "early"), "the pod to run once its claim exists")
    assert events(api, "early", "Pulling")


def test_read_write_once_claim_attaches_to_one_node_at_a_time(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    claim = api.create_namespaced_persistent_volume_claim("default", claim_body("rwo"))
    api.create_namespaced_pod("default", pod_body("first", NODE_A, "rwo"))
    wait_for(lambda: running(api, "first"), "the first pod")
    api.create_namespaced_pod("default", pod_body("neighbour", NODE_A, "rwo"))
    api.create_namespaced_pod("default", pod_body("second", NODE_B, "rwo"))
    wait_for(lambda: running(api, "neighbour"), "a second pod on the same node")
    warning = wait_for(lambda: events(api, "second", "FailedAttachVolume"), "Multi-Attach")[0]
    assert warning.type == "Warning"
    assert warning.source.component == "attachdetach-controller"
    assert warning.message == (
        f'Multi-Attach error for volume "pvc-{claim.metadata.uid}" Volume is already used by '
        "pod(s) first, neighbour"
    )
    with emu.paused():
        for _ in range(20):  # 20 kubelet passes over 0.2 s of retrying the attach
            emu.step(0.01)
    assert phase(api, "second") == "Pending"
    api.delete_namespaced_pod("first", "default")
    api.delete_namespaced_pod("neighbour", "default")
    wait_for(lambda: running(api, "second"), "the second pod once the others are gone")
    assert not events(api, "second", "FailedMount")


@pytest.mark.parametrize("mode", ["ReadWriteMany", "ReadOnlyMany"])
def test_shared_claims_mount_on_several_nodes(api: client.CoreV1Api, mode: str) -> None:
    api.create_namespaced_persistent_volume_claim("default", claim_body("shared", mode))
    api.create_namespaced_pod("default", pod_body("left", NODE_A, "shared"))
    api.create_namespaced_pod("default", pod_body("right", NODE_B, "shared"))
    wait_for(lambda: running(api, "left") and running(api, "right"), "both pods")
    assert not events(api, "right", "FailedAttachVolume")
    assert not events(api, "left", "FailedAttachVolume")


# --- expansion and immutability ----------------------------------------------------------------


def test_bound_claim_grows_but_never_shrinks_and_keeps_its_access_modes(
    api: client.CoreV1Api,
) -> None:
    api.create_namespaced_persistent_volume_claim("default", claim_body("disk", size="10Gi"))
    api.create_namespaced_pod("default", pod_body("user", NODE_A, "disk"))
    wait_for(lambda: running(api, "user"), "the pod")
    grown = api.patch_namespaced_persistent_volume_claim(
        "disk", "default", {"spec": {"resources": {"requests": {"storage": "20Gi"}}}}
    )
    assert grown.spec.resources.requests["storage"] == "20Gi"
    assert grown.status.capacity["storage"] == "10Gi"  # the resizer catches up on a tick
    wait_for(
        lambda: (
            api.read_namespaced_persistent_volume_claim("disk", "default").status.capacity[
                "storage"
            ]
            == "20Gi"
        ),
        "the resized capacity",
    )
    resized = api.read_namespaced_persistent_volume_claim("disk", "default")
    assert resized.status.allocated_resources == {"storage": "20Gi"}
    assert not resized.status.conditions
    reasons = [
        (e.reason, e.message)
        for e in api.list_namespaced_event(
            "default", field_selector="involvedObject.name=disk"
        ).items
    ]
    volume = resized.spec.volume_name
    assert ("Resizing", f"External resizer is resizing volume {volume}") in reasons
    assert (
        "FileSystemResizeSuccessful",
        f'MountVolume.NodeExpandVolume succeeded for volume "{volume}" {NODE_A}',
    ) in reasons
    raw = api.api_client.call_api(
        "/api/v1/namespaces/default/persistentvolumeclaims/disk",
        "GET",
        response_type="object",
        _return_http_data_only=True,
    )
    kubernetes_validate.validate(raw, kubernetes_validate.latest_version(), strict=True)

    with pytest.raises(ApiException) as shrink:
        api.patch_namespaced_persistent_volume_claim(
            "disk", "default", {"spec": {"resources": {"requests": {"storage": "5Gi"}}}}
        )
    assert shrink.value.status == 422
    assert error_of(shrink.value)["reason"] == "Invalid"
    assert error_of(shrink.value)["message"] == (
        'PersistentVolumeClaim "disk" is invalid: spec.resources.requests.storage: Forbidden: '
        "field can not be less than previous value"
    )

    current = api.read_namespaced_persistent_volume_claim("disk", "default")
    current.spec.access_modes = ["ReadWriteMany"]
    with pytest.raises(ApiException) as modes:
        api.replace_namespaced_persistent_volume_claim("disk", "default", current)
    assert modes.value.status == 422
    assert error_of(modes.value)["message"] == (
        'PersistentVolumeClaim "disk" is invalid: spec: Forbidden: spec is immutable after '
        "creation except resources.requests and volumeAttributesClassName for bound claims"
    )
    current = api.read_namespaced_persistent_volume_claim("disk", "default")
    current.spec.resources.requests["storage"] = "30Gi"
    assert api.replace_namespaced_persistent_volume_claim("disk", "default", current)
    wait_for(
        lambda: (
            api.read_namespaced_persistent_volume_claim("disk", "default").status.capacity[
                "storage"
            ]
            == "30Gi"
        ),
        "a second resize by update",
    )


# --- force deletion ----------------------------------------------------------------------------


def test_force_delete_frees_a_pod_stuck_on_a_lost_node(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    api.create_namespaced_persistent_volume_claim("default", claim_body("work"))
    api.create_namespaced_pod("default", pod_body("stranded", NODE_A, "work"))
    wait_for(lambda: running(api, "stranded"), "the pod")
    emu.lose_node(NODE_A)
    api.delete_namespaced_pod("stranded", "default")  # graceful: the kubelet never confirms
    with emu.paused():
        for _ in range(5):  # 5 s: far past the termination grace, short of eviction (30 s)
            emu.step(1.0)
    stuck = api.read_namespaced_pod("stranded", "default")
    assert stuck.metadata.deletion_timestamp is not None
    api.create_namespaced_pod("default", pod_body("replacement", NODE_B, "work"))
    wait_for(lambda: events(api, "replacement", "FailedAttachVolume"), "Multi-Attach")
    api.delete_namespaced_pod("stranded", "default", grace_period_seconds=0)
    with pytest.raises(ApiException) as gone:
        api.read_namespaced_pod("stranded", "default")
    assert gone.value.status == 404
    wait_for(lambda: running(api, "replacement"), "the replacement once the volume is free")


def test_force_delete_of_a_running_pod_on_a_lost_node_is_immediate(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    api.create_namespaced_persistent_volume_claim("default", claim_body("scratch"))
    api.create_namespaced_pod("default", pod_body("orphan", NODE_B, "scratch"))
    wait_for(lambda: running(api, "orphan"), "the pod")
    emu.lose_node(NODE_B)
    deleted = api.delete_namespaced_pod("orphan", "default", grace_period_seconds=0)
    assert deleted.metadata.name == "orphan"
    assert [p.metadata.name for p in api.list_namespaced_pod("default").items] == []


# --- kubelet Summary API -----------------------------------------------------------------------


def test_stats_summary_reports_volume_usage_of_running_pods(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    api.create_namespaced_persistent_volume_claim("default", claim_body("vol", size="10Gi"))
    api.create_namespaced_pod("default", pod_body("reader", NODE_A, "vol"))
    pod = wait_for(
        lambda: running(api, "reader") and api.read_namespaced_pod("reader", "default"), "pod"
    )
    emu.set_volume_usage("default", "vol", 3 * GIB)
    stats = summary(api, NODE_A)
    node = api.read_node(NODE_A)
    assert stats["node"]["nodeName"] == NODE_A
    assert stats["node"]["startTime"] == node.metadata.creation_timestamp.strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    [pod_stats] = stats["pods"]
    assert pod_stats["podRef"] == {
        "name": "reader",
        "namespace": "default",
        "uid": pod.metadata.uid,
    }
    assert pod_stats["startTime"]
    [volume] = pod_stats["volume"]
    assert volume["name"] == "data"
    assert volume["pvcRef"] == {"name": "vol", "namespace": "default"}
    assert volume["usedBytes"] == 3 * GIB
    assert volume["capacityBytes"] == 10 * GIB
    assert volume["availableBytes"] == 7 * GIB
    assert volume["inodes"] >= volume["inodesUsed"] > 0
    assert volume["time"]
    assert summary(api, NODE_B)["pods"] == []
    # without _preload_content=False the client hands back a str (a Python repr of the JSON)
    assert isinstance(api.connect_get_node_proxy_with_path(NODE_A, "stats/summary"), str)


def test_stats_summary_defaults_to_no_usage_and_fails_like_the_apiserver(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    api.create_namespaced_persistent_volume_claim("default", claim_body("fresh", size="1Gi"))
    api.create_namespaced_pod("default", pod_body("new", NODE_B, "fresh"))
    wait_for(lambda: running(api, "new"), "the pod")
    [volume] = summary(api, NODE_B)["pods"][0]["volume"]
    assert (volume["usedBytes"], volume["availableBytes"]) == (0, GIB)
    with pytest.raises(ApiException) as unknown:
        summary(api, "gpu-h100-9")
    assert unknown.value.status == 404
    assert error_of(unknown.value)["reason"] == "NotFound"
    assert error_of(unknown.value)["message"] == 'nodes "gpu-h100-9" not found'
    emu.lose_node(NODE_B)
    with pytest.raises(ApiException) as lost:
        summary(api, NODE_B)
    assert lost.value.status == 503
    assert error_of(lost.value)["reason"] == "ServiceUnavailable"
    assert error_of(lost.value)["message"].startswith("error trying to reach service: dial tcp ")
    with pytest.raises(ApiException) as wrong_path:
        api.connect_get_node_proxy_with_path(NODE_A, "no/such/path")
    assert wrong_path.value.status == 404
    with pytest.raises(ValueError, match="must not be negative"):
        emu.set_volume_usage("default", "fresh", -1)
