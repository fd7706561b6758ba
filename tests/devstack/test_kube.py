"""The kube emulator's apiserver semantics, exercised through the official kubernetes client."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from devstack.kube import KubeEmulator
from tests.devstack import (
    KUBECTL,
    config_map,
    core_api,
    error_body,
    pod_body,
    start_emulator,
    wait_for,
)

# --- discovery --------------------------------------------------------------------------------


def test_version_names_the_emulator_as_a_development_stand_in(emu: KubeEmulator) -> None:
    cfg = client.Configuration()
    cfg.host = emu.url
    info = client.VersionApi(client.ApiClient(cfg)).get_code()
    assert info.git_version.endswith("-starverse-emulator")
    assert "development stand-in" in info.go_version
    groups = client.ApisApi(client.ApiClient(cfg)).get_api_versions()
    assert [g.name for g in groups.groups] == [
        "networking.k8s.io",
        "coordination.k8s.io",
        "gateway.networking.k8s.io",
        "rbac.authorization.k8s.io",
        "apps",
        "snapshot.storage.k8s.io",
        "http.keda.sh",
    ]


@pytest.fixture
def default_fleet() -> Iterator[client.CoreV1Api]:
    """The fleet `make run` starts (two nodes of each GPU profile), on an emulator of its own."""
    emulator = start_emulator()
    api = core_api(emulator)
    yield api
    api.api_client.close()
    emulator.stop()


def test_default_fleet_nodes_carry_gpu_labels_capacity_and_taints(
    default_fleet: client.CoreV1Api,
) -> None:
    api = default_fleet
    nodes = api.list_node().items
    assert [n.metadata.name for n in nodes] == [
        "cpu-0",
        "cpu-1",
        "gpu-a100-0",
        "gpu-a100-1",
        "gpu-h100-0",
        "gpu-h100-1",
        "gpu-rtx4090-0",
        "gpu-rtx4090-1",
    ]
    h100 = api.read_node("gpu-h100-0")
    labels = h100.metadata.labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["kubernetes.io/hostname"] == "gpu-h100-0"
    assert labels["node.kubernetes.io/instance-type"] == "gpu-8x-h100-80gb"
    assert labels["starverse.io/interconnect"] == "nvlink"
    assert api.read_node("gpu-rtx4090-1").metadata.labels["starverse.io/interconnect"] == "pcie"
    assert h100.status.capacity["nvidia.com/gpu"] == "8"
    assert h100.status.capacity["cpu"] == "192"
    assert h100.status.capacity["memory"] == "2048Gi"
    # like a real kubelet: capacity less system/kube reservations and the eviction threshold
    assert h100.status.allocatable["cpu"] == "190"
    assert h100.status.allocatable["memory"] == "2032Gi"
    assert [(t.key, t.value, t.effect) for t in h100.spec.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")
    ]
    # the CPU-only nodes (no-GPU mode): no GPU to advertise, no GPU taint
    cpu = api.read_node("cpu-0")
    assert "nvidia.com/gpu" not in cpu.status.capacity
    assert "nvidia.com/gpu.product" not in cpu.metadata.labels
    assert not cpu.spec.taints
    ready = next(c for c in h100.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("True", "KubeletReady")
    assert h100.status.node_info.kubelet_version.endswith("-starverse-emulator")
    assert [ns.metadata.name for ns in api.list_namespace().items] == [
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
    ]


# --- errors -----------------------------------------------------------------------------------


def test_create_twice_is_409_already_exists(api: client.CoreV1Api) -> None:
    api.create_namespaced_config_map("default", config_map("settings"))
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_config_map("default", config_map("settings"))
    assert caught.value.status == 409
    assert error_body(caught.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'configmaps "settings" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "settings", "kind": "configmaps"},
        "code": 409,
    }


def test_missing_objects_and_namespaces_are_404_not_found(api: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        api.read_namespaced_pod("ghost", "default")
    assert caught.value.status == 404
    body = error_body(caught.value)
    assert (body["reason"], body["message"], body["details"]) == (
        "NotFound",
        'pods "ghost" not found',
        {"name": "ghost", "kind": "pods"},
    )
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_config_map("nowhere", config_map("x"))
    assert caught.value.status == 404
    assert error_body(caught.value)["message"] == 'namespaces "nowhere" not found'
    with pytest.raises(ApiException) as caught:
        client.NetworkingV1Api(api.api_client).read_namespaced_network_policy("np", "default")
    assert error_body(caught.value)["message"] == (
        'networkpolicies.networking.k8s.io "np" not found'
    )
    assert error_body(caught.value)["details"]["group"] == "networking.k8s.io"


def test_replace_with_stale_resource_version_is_409_conflict(api: client.CoreV1Api) -> None:
    created = api.create_namespaced_config_map("default", config_map("cfg"))
    fresh = api.read_namespaced_config_map("cfg", "default")
    fresh.data = {"k": "new"}
    replaced = api.replace_namespaced_config_map("cfg", "default", fresh)
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    assert replaced.metadata.generation == 2
    created.data = {"k": "stale"}
    with pytest.raises(ApiException) as caught:
        api.replace_namespaced_config_map("cfg", "default", created)
    assert caught.value.status == 409
    body = error_body(caught.value)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on configmaps "cfg": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert api.read_namespaced_config_map("cfg", "default").data == {"k": "new"}


def test_schema_violations_are_422_invalid_with_field_causes(api: client.CoreV1Api) -> None:
    body = pod_body("typed")
    body["spec"]["containers"][0]["image"] = 3
    body["spec"]["containers"][0]["bogus"] = True
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_pod("default", body)
    assert caught.value.status == 422
    status = error_body(caught.value)
    assert status["reason"] == "Invalid"
    assert status["details"]["name"] == "typed"
    assert status["details"]["kind"] == "Pod"
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueTypeInvalid",
            "message": "Invalid value: 3: must be of type string",
            "field": "spec.containers[0].image",
        },
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: field not declared in schema",
            "field": "spec.containers[0].bogus",
        },
    ]
    assert status["message"].startswith('Pod "typed" is invalid: [spec.containers[0].image: ')


def test_bad_name_and_missing_image_are_422_invalid(api: client.CoreV1Api) -> None:
    body = pod_body("Bad_Name")
    del body["spec"]["containers"][0]["image"]
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_pod("default", body)
    assert caught.value.status == 422
    causes = error_body(caught.value)["details"]["causes"]
    assert [(c["field"], c["reason"]) for c in causes] == [
        ("metadata.name", "FieldValueInvalid"),
        ("spec.containers[0].image", "FieldValueRequired"),
    ]
    assert causes[0]["message"].startswith(
        'Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of'
    )
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_config_map("default", {"apiVersion": "v1", "kind": "ConfigMap"})
    assert error_body(caught.value)["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value: name or generateName is required",
            "field": "metadata.name",
        }
    ]


def test_pod_spec_is_immutable_except_image(api: client.CoreV1Api) -> None:
    api.create_namespaced_pod("default", pod_body("frozen"))
    pod = wait_for(  # the kubelet keeps writing status until the pod runs
        lambda: (p := api.read_namespaced_pod("frozen", "default")).status.phase == "Running" and p
    )
    pod.spec.containers[0].image = "nvcr.io/nvidia/pytorch:24.06-py3"
    updated = api.replace_namespaced_pod("frozen", "default", pod)
    assert updated.spec.containers[0].image == "nvcr.io/nvidia/pytorch:24.06-py3"
    updated.spec.containers[0].args = ["--epochs", "3"]
    with pytest.raises(ApiException) as caught:
        api.replace_namespaced_pod("frozen", "default", updated)
    assert caught.value.status == 422
    cause = error_body(caught.value)["details"]["causes"][0]
    assert (cause["reason"], cause["field"]) == ("FieldValueForbidden", "spec")
    assert "pod updates may not change fields" in cause["message"]


# --- metadata ---------------------------------------------------------------------------------


def test_server_sets_uid_resource_version_timestamps_and_generate_name(
    api: client.CoreV1Api,
) -> None:
    first = api.create_namespaced_config_map(
        "default",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "job-"}},
    )
    second = api.create_namespaced_config_map("default", config_map("named"))
    assert first.metadata.name.startswith("job-")
    assert len(first.metadata.name) == len("job-") + 5
    assert first.metadata.uid != second.metadata.uid
    # opaque to clients and only ever growing (the emulator's kubelets may write in between)
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    assert first.metadata.generation == 1
    assert first.metadata.creation_timestamp is not None
    listing = api.list_namespaced_config_map("default")
    assert int(listing.metadata.resource_version) >= int(second.metadata.resource_version)


# --- selectors --------------------------------------------------------------------------------


def test_label_selectors(api: client.CoreV1Api) -> None:
    for name, labels in (
        ("web", {"app": "web", "tier": "front"}),
        ("db", {"app": "db", "tier": "back", "gpu": "yes"}),
        ("cache", {"app": "cache"}),
    ):
        api.create_namespaced_config_map("default", config_map(name, labels))

    def names(selector: str) -> list[str]:
        items = api.list_namespaced_config_map("default", label_selector=selector).items
        return [i.metadata.name for i in items]

    assert names("app=web") == ["web"]
    assert names("app==db") == ["db"]
    assert names("app!=web") == ["cache", "db"]
    assert names("tier in (front,back)") == ["db", "web"]
    assert names("tier notin (front)") == ["cache", "db"]
    assert names("gpu") == ["db"]
    assert names("!gpu") == ["cache", "web"]
    assert names("app in (web,db),!gpu") == ["web"]
    with pytest.raises(ApiException) as caught:
        names("app in ()")
    assert caught.value.status == 400


def test_field_selectors(api: client.CoreV1Api) -> None:
    api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    api.create_namespaced_config_map("default", config_map("a"))
    api.create_namespaced_config_map("team", config_map("a"))
    api.create_namespaced_config_map("team", config_map("b"))

    def names(selector: str) -> list[tuple[str, str]]:
        items = api.list_config_map_for_all_namespaces(field_selector=selector).items
        return [(i.metadata.namespace, i.metadata.name) for i in items]

    assert names("metadata.name=a") == [("default", "a"), ("team", "a")]
    assert names("metadata.namespace=team") == [("team", "a"), ("team", "b")]
    assert names("metadata.namespace!=team,metadata.name==a") == [("default", "a")]
    api.create_namespaced_pod("default", pod_body("sel"))
    pod = wait_for(
        lambda: api.list_namespaced_pod("default", field_selector="status.phase=Running").items,
        what="a running pod",
    )[0]
    node = pod.spec.node_name
    on_node = api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    assert [p.metadata.name for p in on_node] == ["sel"]
    assert api.list_pod_for_all_namespaces(field_selector="spec.nodeName=elsewhere").items == []
    with pytest.raises(ApiException) as caught:
        api.list_namespaced_pod("default", field_selector="spec.image=x")
    assert caught.value.status == 400
    assert error_body(caught.value)["message"] == "field label not supported: spec.image"


# --- patch ------------------------------------------------------------------------------------


def _two_container_pod(api: client.CoreV1Api, name: str) -> None:
    body = pod_body(name)
    body["spec"]["containers"].append({"name": "sidecar", "image": "busybox:1.36"})
    api.create_namespaced_pod("default", body)


def test_strategic_merge_patch_merges_containers_by_name(api: client.CoreV1Api) -> None:
    _two_container_pod(api, "smp")
    patched = api.patch_namespaced_pod(
        "smp",
        "default",
        {
            "metadata": {"labels": {"team": "ml"}},
            "spec": {"containers": [{"name": "sidecar", "image": "busybox:1.37"}]},
        },
    )
    assert [(c.name, c.image) for c in patched.spec.containers] == [
        ("main", "nvcr.io/nvidia/pytorch:24.05-py3"),
        ("sidecar", "busybox:1.37"),
    ]
    assert patched.metadata.labels == {"app": "smp", "team": "ml"}
    patched = api.patch_namespaced_pod("smp", "default", {"metadata": {"labels": {"team": None}}})
    assert patched.metadata.labels == {"app": "smp"}


def _merge_patch(
    api: client.CoreV1Api, path: str, body: dict[str, Any]
) -> tuple[dict[str, Any], int]:
    response = api.api_client.call_api(
        path,
        "PATCH",
        header_params={
            "Content-Type": "application/merge-patch+json",
            "Accept": "application/json",
        },
        body=body,
        response_type="object",
        _return_http_data_only=False,
    )
    return response[0], response[1]


def test_merge_patch_replaces_lists_and_deletes_nulls(api: client.CoreV1Api) -> None:
    _two_container_pod(api, "merge")
    obj, code = _merge_patch(
        api,
        "/api/v1/namespaces/default/pods/merge",
        {"metadata": {"labels": {"app": None, "x": "1"}}},
    )
    assert code == 200
    assert obj["metadata"]["labels"] == {"x": "1"}
    with pytest.raises(ApiException) as caught:  # a merge patch replaces the whole list
        _merge_patch(
            api,
            "/api/v1/namespaces/default/pods/merge",
            {"spec": {"containers": [{"name": "sidecar", "image": "busybox:1.37"}]}},
        )
    assert caught.value.status == 422
    assert error_body(caught.value)["details"]["causes"][0]["field"] == "spec"


def test_json_patch_operations_and_failed_test_is_422(api: client.CoreV1Api) -> None:
    api.create_namespaced_config_map("default", config_map("jp", {"a": "1"}))
    patched = api.patch_namespaced_config_map(
        "jp",
        "default",
        [
            {"op": "test", "path": "/data/k", "value": "v"},
            {"op": "add", "path": "/data/new", "value": "x"},
            {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
            {"op": "copy", "from": "/data/new", "path": "/data/copied"},
            {"op": "move", "from": "/data/k", "path": "/data/moved"},
            {"op": "remove", "path": "/data/new"},
        ],
    )
    assert patched.data == {"copied": "x", "moved": "v"}
    assert patched.metadata.labels == {"a": "2"}
    with pytest.raises(ApiException) as caught:
        api.patch_namespaced_config_map(
            "jp", "default", [{"op": "test", "path": "/data/moved", "value": "nope"}]
        )
    assert caught.value.status == 422
    assert error_body(caught.value)["message"] == "testing value /data/moved failed: test failed"
    with pytest.raises(ApiException) as caught:
        api.patch_namespaced_config_map(
            "jp", "default", [{"op": "remove", "path": "/data/missing"}]
        )
    assert caught.value.status == 422


# --- watch ------------------------------------------------------------------------------------


def test_watch_from_resource_version_sees_added_modified_deleted(api: client.CoreV1Api) -> None:
    rv = api.list_namespaced_pod("default").metadata.resource_version
    api.create_namespaced_pod("default", pod_body("watched"))
    wait_for(lambda: api.read_namespaced_pod("watched", "default").status.phase == "Running")
    api.delete_namespaced_pod("watched", "default")
    wait_for(lambda: not api.list_namespaced_pod("default").items, what="pod removal")
    stream = watch.Watch()
    seen: list[tuple[str, str]] = []
    for event in stream.stream(
        api.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=2
    ):
        seen.append((event["type"], event["object"].status.phase))
        if event["type"] == "DELETED":
            stream.stop()
    assert seen[0] == ("ADDED", "Pending")
    assert seen[-1][0] == "DELETED"
    assert {kind for kind, _ in seen[1:-1]} == {"MODIFIED"}
    assert ("MODIFIED", "Running") in seen


def test_watch_filters_by_selector_and_reports_transitions(api: client.CoreV1Api) -> None:
    rv = api.list_namespaced_config_map("default").metadata.resource_version
    api.create_namespaced_config_map("default", config_map("w", {"stage": "a"}))
    api.patch_namespaced_config_map("w", "default", {"metadata": {"labels": {"stage": "b"}}})
    api.patch_namespaced_config_map("w", "default", {"metadata": {"labels": {"stage": "a"}}})
    api.create_namespaced_config_map("default", config_map("other", {"stage": "b"}))
    api.create_namespaced_config_map("default", config_map("last", {"stage": "a"}))
    stream = watch.Watch()
    events = []
    for e in stream.stream(
        api.list_namespaced_config_map,
        "default",
        resource_version=rv,
        label_selector="stage=a",
        timeout_seconds=5,
    ):
        events.append((e["type"], e["object"].metadata.name, e["object"].metadata.labels["stage"]))
        if e["object"].metadata.name == "last":  # the last write: everything before it was sent
            stream.stop()
    assert events == [
        ("ADDED", "w", "a"),
        ("DELETED", "w", "b"),
        ("ADDED", "w", "a"),
        ("ADDED", "last", "a"),
    ]


def test_too_old_resource_version_is_410_gone() -> None:
    emu = start_emulator(history_size=5)
    api = core_api(emu)
    try:
        old = api.list_namespaced_config_map("default").metadata.resource_version
        for index in range(10):
            api.create_namespaced_config_map("default", config_map(f"c{index}"))
        with pytest.raises(ApiException) as caught:
            list(
                watch.Watch().stream(
                    api.list_namespaced_config_map,
                    "default",
                    resource_version=old,
                    timeout_seconds=1,
                )
            )
        assert caught.value.status == 410
        assert caught.value.reason.startswith("Expired: too old resource version: ")
        with pytest.raises(ApiException) as caught:
            api.list_namespaced_config_map("default", resource_version=old)
        assert caught.value.status == 410
        body = error_body(caught.value)
        assert (body["reason"], body["code"]) == ("Expired", 410)
    finally:
        api.api_client.close()
        emu.stop()


def test_watch_sends_bookmarks_when_allowed() -> None:
    emu = start_emulator(bookmark_interval_s=0.1)
    api = core_api(emu)
    try:
        rv = api.list_namespaced_pod("default").metadata.resource_version
        kinds = [
            (e["type"], e["raw_object"]["metadata"]["resourceVersion"])
            for e in watch.Watch().stream(
                api.list_namespaced_pod,
                "default",
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=1,
            )
        ]
        assert len(kinds) >= 3
        assert {kind for kind, _ in kinds} == {"BOOKMARK"}
        # a bookmark carries the store's progress: never behind the watch's start, never going
        # back (other objects, the kubelets' Leases among them, move it on meanwhile)
        versions = [int(version) for _, version in kinds]
        assert versions[0] >= int(rv) and versions == sorted(versions)
    finally:
        api.api_client.close()
        emu.stop()


# --- deletion ---------------------------------------------------------------------------------


def test_finalizers_hold_deletion_until_removed(api: client.CoreV1Api) -> None:
    api.create_namespaced_config_map(
        "default", config_map("held", finalizers=["starverse.io/cleanup"])
    )
    deleted = api.delete_namespaced_config_map("held", "default")
    assert deleted.status is None or deleted.status != "Success"
    held = api.read_namespaced_config_map("held", "default")
    assert held.metadata.deletion_timestamp is not None
    assert held.metadata.finalizers == ["starverse.io/cleanup"]
    api.patch_namespaced_config_map(
        "held", "default", [{"op": "remove", "path": "/metadata/finalizers"}]
    )
    with pytest.raises(ApiException) as caught:
        api.read_namespaced_config_map("held", "default")
    assert caught.value.status == 404


def test_owner_reference_gc_deletes_or_orphans_dependents(api: client.CoreV1Api) -> None:
    def owned_secret(name: str, owner: client.V1ConfigMap) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": owner.metadata.name,
                        "uid": owner.metadata.uid,
                    }
                ],
            },
            "stringData": {"token": "t"},
        }

    owner = api.create_namespaced_config_map("default", config_map("owner"))
    api.create_namespaced_secret("default", owned_secret("dependent", owner))
    assert api.read_namespaced_secret("dependent", "default").data == {"token": "dA=="}
    api.delete_namespaced_config_map("owner", "default")
    with pytest.raises(ApiException) as caught:
        api.read_namespaced_secret("dependent", "default")
    assert caught.value.status == 404

    first = api.create_namespaced_config_map("default", config_map("first"))
    second = api.create_namespaced_config_map("default", config_map("second"))
    shared = owned_secret("shared", first)
    shared["metadata"]["ownerReferences"] += owned_secret("x", second)["metadata"][
        "ownerReferences"
    ]
    api.create_namespaced_secret("default", shared)
    api.delete_namespaced_config_map("first", "default")
    survivor = api.read_namespaced_secret("shared", "default")  # another owner is alive
    assert [r.name for r in survivor.metadata.owner_references] == ["second"]

    keeper = api.create_namespaced_config_map("default", config_map("keeper"))
    api.create_namespaced_secret("default", owned_secret("orphan", keeper))
    api.delete_namespaced_config_map("keeper", "default", propagation_policy="Orphan")
    orphan = api.read_namespaced_secret("orphan", "default")
    assert orphan.metadata.owner_references is None


def test_deleting_a_namespace_deletes_its_objects(api: client.CoreV1Api) -> None:
    api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tmp"}})
    api.create_namespaced_config_map("tmp", config_map("inside"))
    api.create_namespaced_config_map("tmp", config_map("held", finalizers=["starverse.io/x"]))
    api.create_namespaced_pod("tmp", pod_body("worker"))
    wait_for(lambda: api.read_namespaced_pod("worker", "tmp").status.phase == "Running")
    api.delete_namespace("tmp")
    assert api.read_namespace("tmp").status.phase == "Terminating"
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_config_map("tmp", config_map("late"))
    assert caught.value.status == 403
    assert error_body(caught.value)["message"] == (
        'configmaps "late" is forbidden: unable to create new content in namespace tmp '
        "because it is being terminated"
    )
    wait_for(
        lambda: (
            not api.list_namespaced_pod("tmp").items
            and [c.metadata.name for c in api.list_namespaced_config_map("tmp").items] == ["held"]
        ),
        what="namespace contents to go",
    )
    assert api.read_namespace("tmp").status.phase == "Terminating"
    api.patch_namespaced_config_map("held", "tmp", {"metadata": {"finalizers": None}})
    wait_for(
        lambda: not [n for n in api.list_namespace().items if n.metadata.name == "tmp"],
        what="namespace removal",
    )
    with pytest.raises(ApiException) as caught:
        api.delete_namespace("default")
    assert caught.value.status == 403


# --- services, claims, secrets --------------------------------------------------------------


def test_services_get_cluster_ips_and_unique_node_ports(api: client.CoreV1Api) -> None:
    def service(name: str, kind: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {"type": kind, "selector": {"app": name}, "ports": [{"port": 8888}]},
        }

    plain = api.create_namespaced_service("default", service("jupyter", "ClusterIP"))
    node_port = api.create_namespaced_service("default", service("ssh", "NodePort"))
    balancer = api.create_namespaced_service("default", service("infer", "LoadBalancer"))
    ips = {s.spec.cluster_ip for s in (plain, node_port, balancer)}
    assert len(ips) == 3
    assert all(ip.startswith("10.96.") for ip in ips)
    assert plain.spec.ports[0].node_port is None
    assert plain.spec.ports[0].target_port == 8888
    ports = {node_port.spec.ports[0].node_port, balancer.spec.ports[0].node_port}
    assert len(ports) == 2
    assert all(30000 <= p <= 32767 for p in ports)
    assert balancer.status.load_balancer.ingress[0].ip.startswith("172.18.255.")
    kubernetes = api.read_namespaced_service("kubernetes", "default")
    assert kubernetes.spec.cluster_ip == "10.96.0.1"


def test_pvc_binds_immediately_and_protection_waits_for_pods(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    claim = api.create_namespaced_persistent_volume_claim(
        "default",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "50Gi"}},
            },
        },
    )
    assert claim.status.phase == "Bound"
    assert claim.status.capacity == {"storage": "50Gi"}
    assert claim.spec.volume_name == f"pvc-{claim.metadata.uid}"
    assert claim.metadata.finalizers == ["kubernetes.io/pvc-protection"]
    body = pod_body("user")
    body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    api.create_namespaced_pod("default", body)
    wait_for(lambda: api.read_namespaced_pod("user", "default").status.phase == "Running")
    api.delete_namespaced_persistent_volume_claim("data", "default")
    emu.step()  # a pass of the controllers: pvc-protection keeps a claim that is in use
    held = api.read_namespaced_persistent_volume_claim("data", "default")
    assert held.metadata.deletion_timestamp is not None
    api.delete_namespaced_pod("user", "default")
    wait_for(
        lambda: not api.list_namespaced_persistent_volume_claim("default").items,
        what="claim removal",
    )


# --- faults and kubectl ------------------------------------------------------------------------


def test_injected_api_faults_fail_then_recover(emu: KubeEmulator, api: client.CoreV1Api) -> None:
    emu.inject_api_fault(status=500, count=1, verb="list", resource="pods")
    api.list_namespaced_config_map("default")  # other resources are unaffected
    with pytest.raises(ApiException) as caught:
        api.list_namespaced_pod("default")
    assert caught.value.status == 500
    assert error_body(caught.value)["reason"] == "InternalError"
    assert api.list_namespaced_pod("default").items == []
    emu.inject_api_fault(status=429, count=2, verb="create")
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            api.create_namespaced_config_map("default", config_map("throttled"))
        assert caught.value.status == 429
        assert caught.value.headers["Retry-After"] == "1"
        assert error_body(caught.value)["reason"] == "TooManyRequests"
    assert api.create_namespaced_config_map("default", config_map("throttled")).metadata.uid


@pytest.mark.skipif(shutil.which(KUBECTL) is None, reason="kubectl is not installed at /usr/bin")
def test_kubectl_get_nodes_through_a_written_kubeconfig(emu: KubeEmulator, tmp_path: Path) -> None:
    kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig")
    assert f"server: {emu.url}" in kubeconfig.read_text()
    command = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache")]
    result = subprocess.run(
        [*command, "get", "nodes"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [line.split()[0] for line in lines[1:]] == sorted(s.name for s in emu.node_specs)
    assert all(line.split()[1] == "Ready" for line in lines[1:])
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(pod_body("from-kubectl", gpus=1)))
    created = subprocess.run(
        [*command, "create", "-f", str(manifest)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == "pod/from-kubectl created"
