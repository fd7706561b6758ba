"""The kube emulator's GPU node simulation: scheduling, kubelet lifecycle, faults and lost nodes."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from devstack.kube import KubeEmulator, NodeSpec
from tests.devstack import core_api, pod_body, start_emulator, wait_for


def phase(api: client.CoreV1Api, name: str, namespace: str = "default") -> str:
    return api.read_namespaced_pod(name, namespace).status.phase


def condition(pod: client.V1Pod, kind: str) -> client.V1PodCondition | None:
    return next((c for c in pod.status.conditions or [] if c.type == kind), None)


def events_for(api: client.CoreV1Api, name: str) -> list[tuple[str, str, str]]:
    items = api.list_namespaced_event("default", field_selector=f"involvedObject.name={name}")
    return [(e.reason, e.type, e.source.component) for e in items.items]


def test_gpu_pod_runs_and_a_second_pinned_pod_is_rejected(api: client.CoreV1Api) -> None:
    created = api.create_namespaced_pod("default", pod_body("big", gpus=8))
    assert created.status.phase == "Pending"
    assert created.spec.node_name is None
    wait_for(lambda: phase(api, "big") == "Running", what="the 8-GPU pod to run")
    pod = api.read_namespaced_pod("big", "default")
    node = api.read_node(pod.spec.node_name)
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert pod.status.pod_ip.startswith("10.244.")
    assert pod.status.host_ip == node.status.addresses[0].address
    assert [(c.type, c.status) for c in pod.status.conditions if c.type in ("Ready",)] == [
        ("Ready", "True")
    ]
    state = pod.status.container_statuses[0]
    assert state.ready is True
    assert state.state.running.started_at is not None
    assert pod.spec.containers[0].resources.requests == {"nvidia.com/gpu": "8"}

    api.create_namespaced_pod("default", pod_body("pinned", gpus=8, nodeName=pod.spec.node_name))
    wait_for(lambda: phase(api, "pinned") == "Failed", what="the pinned pod to be rejected")
    pinned = api.read_namespaced_pod("pinned", "default")
    assert pinned.status.reason == "OutOfnvidia.com/gpu"
    assert pinned.status.message == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 8, "
        "used: 8, capacity: 8"
    )
    assert ("OutOfnvidia.com/gpu", "Warning", "kubelet") in events_for(api, "pinned")


def test_pod_lifecycle_events_come_from_scheduler_and_kubelet(api: client.CoreV1Api) -> None:
    api.create_namespaced_pod("default", pod_body("events", gpus=1))
    wait_for(lambda: phase(api, "events") == "Running")
    assert events_for(api, "events") == [
        ("Scheduled", "Normal", "default-scheduler"),
        ("Pulling", "Normal", "kubelet"),
        ("Pulled", "Normal", "kubelet"),
        ("Created", "Normal", "kubelet"),
        ("Started", "Normal", "kubelet"),
    ]
    event = api.list_namespaced_event(
        "default", field_selector="involvedObject.name=events,reason=Pulling"
    ).items[0]
    pod = api.read_namespaced_pod("events", "default")
    assert event.involved_object.uid == pod.metadata.uid
    assert event.involved_object.kind == "Pod"
    assert event.involved_object.field_path == "spec.containers{main}"
    assert event.message == 'Pulling image "nvcr.io/nvidia/pytorch:24.05-py3"'
    assert event.count == 1
    assert event.source.host == pod.spec.node_name
    assert event.first_timestamp is not None
    assert event.last_timestamp is not None


def test_pod_that_fits_nowhere_stays_pending_with_failed_scheduling(
    api: client.CoreV1Api,
) -> None:
    api.create_namespaced_pod("default", pod_body("huge", gpus=16))
    pod = wait_for(
        lambda: (
            (p := api.read_namespaced_pod("huge", "default")) and condition(p, "PodScheduled") and p
        ),
        what="PodScheduled=False",
    )
    scheduled = condition(pod, "PodScheduled")
    assert scheduled is not None
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")
    assert scheduled.message == (
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are "
        "available: 4 No preemption victims found for incoming pod."
    )
    assert pod.status.phase == "Pending"
    failed = api.list_namespaced_event("default", field_selector="reason=FailedScheduling")
    assert [(e.type, e.message) for e in failed.items] == [("Warning", scheduled.message)]

    untolerated = pod_body("no-toleration", gpus=1)
    untolerated["spec"]["tolerations"] = []
    api.create_namespaced_pod("default", untolerated)
    message = wait_for(
        lambda: (
            (c := condition(api.read_namespaced_pod("no-toleration", "default"), "PodScheduled"))
            and c.message
        )
    )
    assert message.startswith(
        "0/4 nodes are available: 4 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_node_selector_and_required_affinity_pick_the_gpu_product(
    api: client.CoreV1Api,
) -> None:
    api.create_namespaced_pod(
        "default",
        pod_body(
            "consumer", gpus=1, nodeSelector={"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090"}
        ),
    )
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "starverse.io/interconnect",
                                "operator": "In",
                                "values": ["nvlink"],
                            },
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "NotIn",
                                "values": ["NVIDIA-A100-SXM4-80GB"],
                            },
                        ]
                    }
                ]
            }
        }
    }
    api.create_namespaced_pod("default", pod_body("trainer", gpus=2, affinity=affinity))
    wait_for(lambda: phase(api, "consumer") == "Running" and phase(api, "trainer") == "Running")
    assert api.read_namespaced_pod("consumer", "default").spec.node_name.startswith("gpu-rtx4090-")
    assert api.read_namespaced_pod("trainer", "default").spec.node_name.startswith("gpu-h100-")


def test_cordoned_nodes_are_skipped_by_the_scheduler() -> None:
    emu = start_emulator(fleet={"h100": 2})
    api = core_api(emu)
    try:
        api.patch_node("gpu-h100-0", {"spec": {"unschedulable": True}})
        api.create_namespaced_pod("default", pod_body("a", gpus=1))
        wait_for(lambda: phase(api, "a") == "Running")
        assert api.read_namespaced_pod("a", "default").spec.node_name == "gpu-h100-1"
        api.patch_node("gpu-h100-1", {"spec": {"unschedulable": True}})
        api.create_namespaced_pod("default", pod_body("b", gpus=1))
        message = wait_for(
            lambda: (
                (c := condition(api.read_namespaced_pod("b", "default"), "PodScheduled"))
                and c.message
            )
        )
        assert message.startswith("0/2 nodes are available: 2 node(s) were unschedulable.")
        api.patch_node("gpu-h100-0", {"spec": {"unschedulable": False}})
        wait_for(lambda: phase(api, "b") == "Running", what="scheduling after uncordon")
        assert api.read_namespaced_pod("b", "default").spec.node_name == "gpu-h100-0"
    finally:
        api.api_client.close()
        emu.stop()


def test_failing_image_pull_backs_off_with_events(emu: KubeEmulator, api: client.CoreV1Api) -> None:
    emu.fail_image_pull("registry.invalid/")
    api.create_namespaced_pod("default", pod_body("broken", image="registry.invalid/x:1"))

    def waiting_reason() -> str:
        statuses = api.read_namespaced_pod("broken", "default").status.container_statuses
        return statuses[0].state.waiting.reason if statuses and statuses[0].state.waiting else ""

    wait_for(lambda: waiting_reason() == "ErrImagePull", what="ErrImagePull")
    wait_for(lambda: waiting_reason() == "ImagePullBackOff", what="ImagePullBackOff")
    assert phase(api, "broken") == "Pending"
    reasons = [
        (e.reason, e.type, e.message)
        for e in api.list_namespaced_event(
            "default", field_selector="involvedObject.name=broken"
        ).items
    ]
    assert ("Failed", "Warning", "Error: ErrImagePull") in reasons
    assert ("Failed", "Warning", "Error: ImagePullBackOff") in reasons
    assert ("BackOff", "Normal", 'Back-off pulling image "registry.invalid/x:1"') in reasons
    emu.clear_image_pull_failures()
    wait_for(lambda: phase(api, "broken") == "Running", timeout=5, what="recovery")


def test_lost_node_marks_pods_not_ready_then_evicts_them() -> None:
    emu = start_emulator(nodes=[NodeSpec(name="solo")], eviction_grace_s=0.4)
    api = core_api(emu)
    try:
        api.create_namespaced_pod("default", pod_body("victim", gpus=8))
        wait_for(lambda: phase(api, "victim") == "Running")
        emu.lose_node("solo")
        node = api.read_node("solo")
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        assert (ready.status, ready.reason) == ("Unknown", "NodeStatusUnknown")
        assert ("node.kubernetes.io/unreachable", "NoExecute") in [
            (t.key, t.effect) for t in node.spec.taints
        ]
        pod = api.read_namespaced_pod("victim", "default")
        assert pod.status.phase == "Running"
        ready = condition(pod, "Ready")
        assert ready is not None
        assert (ready.status, ready.reason) == ("False", "NodeLost")
        assert pod.status.reason == "NodeLost"
        wait_for(lambda: not api.list_namespaced_pod("default").items, what="eviction")
        reasons = [e.reason for e in api.list_namespaced_event("default").items]
        assert "NodeNotReady" in reasons
        assert "TaintManagerEviction" in reasons
        emu.restore_node("solo")
        node = api.read_node("solo")
        assert next(c for c in node.status.conditions if c.type == "Ready").status == "True"
        assert [t.key for t in node.spec.taints] == ["nvidia.com/gpu"]
        api.create_namespaced_pod("default", pod_body("after", gpus=8))
        wait_for(lambda: phase(api, "after") == "Running", what="a pod on the restored node")
    finally:
        api.api_client.close()
        emu.stop()


def test_pod_deletion_is_graceful_and_ends_with_deleted_event(api: client.CoreV1Api) -> None:
    api.create_namespaced_pod("default", pod_body("doomed", gpus=1))
    wait_for(lambda: phase(api, "doomed") == "Running")
    rv = api.list_namespaced_pod("default").metadata.resource_version
    deleted = api.delete_namespaced_pod("doomed", "default")
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 30
    stream = watch.Watch()
    kinds = []
    for event in stream.stream(
        api.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=3
    ):
        kinds.append(event["type"])
        if event["type"] == "DELETED":
            assert event["object"].status.phase == "Succeeded"
            stream.stop()
    assert kinds[-1] == "DELETED"
    with pytest.raises(ApiException) as caught:
        api.read_namespaced_pod("doomed", "default")
    assert caught.value.status == 404
    assert [r for r, _, _ in events_for(api, "doomed")][-1] == "Killing"


def test_emulator_written_objects_pass_strict_schema_validation(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    emu.fail_image_pull("bad/")
    api.create_namespaced_pod("default", pod_body("ok", gpus=1))
    api.create_namespaced_pod("default", pod_body("bad", image="bad/image:1"))
    api.create_namespaced_pod("default", pod_body("stuck", gpus=64))
    wait_for(lambda: phase(api, "ok") == "Running")
    wait_for(lambda: api.list_namespaced_event("default", field_selector="reason=BackOff").items)
    raw: list[dict[str, Any]] = []
    for path in (
        "/api/v1/nodes",
        "/api/v1/pods",
        "/api/v1/events",
        "/api/v1/namespaces",
        "/api/v1/services",
        "/apis/coordination.k8s.io/v1/leases",
    ):
        listing = api.api_client.call_api(
            path, "GET", response_type="object", _return_http_data_only=True
        )
        kind = listing["kind"].removesuffix("List")
        raw.extend(
            {"kind": kind, "apiVersion": listing["apiVersion"], **item} for item in listing["items"]
        )
    assert len(raw) > 20
    version = kubernetes_validate.latest_version()
    for obj in raw:
        kubernetes_validate.validate(obj, version, strict=True)


def test_a_pod_made_again_under_its_name_is_another_pod_and_events_say_which(
    api: client.CoreV1Api,
) -> None:
    """As on a real cluster, a restart's new pod has the old one's name and a new uid, and each
    event names its pod by uid: the old pod's Killing is listed with the new pod's events."""
    api.create_namespaced_pod("default", pod_body("again", gpus=1))
    wait_for(lambda: phase(api, "again") == "Running")
    old = api.read_namespaced_pod("again", "default").metadata.uid
    api.delete_namespaced_pod("again", "default", grace_period_seconds=1)

    def gone() -> bool:
        try:
            api.read_namespaced_pod("again", "default")
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(gone, what="the old pod to go")
    api.create_namespaced_pod("default", pod_body("again", gpus=1))
    wait_for(lambda: phase(api, "again") == "Running")
    new = api.read_namespaced_pod("again", "default").metadata.uid

    items = api.list_namespaced_event("default", field_selector="involvedObject.name=again").items
    by_pod = {(e.involved_object.uid, e.reason) for e in items}
    assert new != old
    assert (old, "Killing") in by_pod and (new, "Killing") not in by_pod
    assert {(new, "Started"), (old, "Started")} <= by_pod
