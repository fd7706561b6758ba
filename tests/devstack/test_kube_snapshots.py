"""The kube emulator's CSI volume snapshots through the official kubernetes client
(CustomObjectsApi for snapshot.storage.k8s.io/v1): the default class, snapshots becoming ready
with their content, errors for a missing claim, and claims restored from a snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from devstack.kube import KubeEmulator
from tests.devstack import wait_for

NS = "default"
GROUP, VERSION = "snapshot.storage.k8s.io", "v1"


@pytest.fixture
def custom(emu: KubeEmulator, kubeconfig: str) -> Iterator[client.CustomObjectsApi]:
    api_client = config.new_client_from_config(config_file=kubeconfig)
    yield client.CustomObjectsApi(api_client)
    api_client.close()


def claim_body(name: str, size: str = "10Gi", mode: str = "ReadWriteOnce", **spec: Any) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": [mode], "resources": {"requests": {"storage": size}}, **spec},
    }


def snapshot_body(name: str, claim: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "VolumeSnapshot",
        "metadata": {"name": name},
        "spec": {"source": {"persistentVolumeClaimName": claim}, **spec},
    }


def snapshot(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(GROUP, VERSION, NS, "volumesnapshots", name)


def restore_source(name: str) -> dict[str, str]:
    return {"apiGroup": GROUP, "kind": "VolumeSnapshot", "name": name}


def test_a_snapshot_of_a_bound_claim_becomes_ready_with_its_content(
    emu: KubeEmulator, custom: client.CustomObjectsApi, api: client.CoreV1Api
) -> None:
    [default_class] = custom.list_cluster_custom_object(GROUP, VERSION, "volumesnapshotclasses")[
        "items"
    ]
    assert default_class["driver"] == "starverse.io/emulated"
    api.create_namespaced_persistent_volume_claim(NS, claim_body("weights", "20Gi"))
    with emu.paused():
        custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, "volumesnapshots", snapshot_body("weights-snap", "weights")
        )
        emu.step()
        cut = snapshot(custom, "weights-snap")
        content_name = cut["status"]["boundVolumeSnapshotContentName"]
        assert cut["status"]["readyToUse"] is False
        assert cut["spec"]["volumeSnapshotClassName"] == default_class["metadata"]["name"]
        emu.step(0.4)
        assert snapshot(custom, "weights-snap")["status"]["readyToUse"] is False
        emu.step(0.2)

    status = snapshot(custom, "weights-snap")["status"]
    assert status["readyToUse"] is True
    assert status["restoreSize"] == "20Gi"
    assert status["creationTime"].endswith("Z")
    content = custom.get_cluster_custom_object(
        GROUP, VERSION, "volumesnapshotcontents", content_name
    )
    assert content["status"]["readyToUse"] is True
    assert content["status"]["restoreSize"] == 20 * 2**30
    assert content["spec"]["volumeSnapshotRef"]["name"] == "weights-snap"
    assert content["spec"]["deletionPolicy"] == "Delete"
    claim = api.read_namespaced_persistent_volume_claim("weights", NS)
    assert content["spec"]["source"]["volumeHandle"] == claim.spec.volume_name

    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "volumesnapshots", "weights-snap")
    wait_for(
        lambda: (
            not custom.list_cluster_custom_object(GROUP, VERSION, "volumesnapshotcontents")["items"]
        ),
        "the content deleted with its snapshot",
    )


def test_a_snapshot_of_a_missing_claim_has_an_error_and_is_never_ready(
    emu: KubeEmulator, custom: client.CustomObjectsApi
) -> None:
    with emu.paused():
        custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, "volumesnapshots", snapshot_body("orphan", "nowhere")
        )
        for _ in range(5):
            emu.step(1.0)
    status = snapshot(custom, "orphan")["status"]
    assert status["readyToUse"] is False
    assert 'persistentvolumeclaim \\"nowhere\\" not found' in status["error"]["message"]
    assert "boundVolumeSnapshotContentName" not in status
    assert (
        custom.list_cluster_custom_object(GROUP, VERSION, "volumesnapshotcontents")["items"] == []
    )


def test_a_snapshot_needs_exactly_one_source(custom: client.CustomObjectsApi) -> None:
    body = snapshot_body("both", "weights")
    body["spec"]["source"]["volumeSnapshotContentName"] = "snapcontent-x"
    with pytest.raises(ApiException) as denied:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "volumesnapshots", body)
    assert denied.value.status == 422
    assert (
        custom.list_namespaced_custom_object(GROUP, VERSION, NS, "volumesnapshots")["items"] == []
    )


def test_a_claim_restored_from_a_snapshot_binds_once_it_is_ready(
    emu: KubeEmulator, custom: client.CustomObjectsApi, api: client.CoreV1Api
) -> None:
    api.create_namespaced_persistent_volume_claim(NS, claim_body("weights", "20Gi"))
    with emu.paused():
        restored = api.create_namespaced_persistent_volume_claim(
            NS,
            claim_body("replica", "20Gi", "ReadOnlyMany", dataSource=restore_source("snap")),
        )
        assert restored.status.phase == "Pending"
        assert restored.spec.data_source_ref.name == "snap"
        emu.step()
        assert api.read_namespaced_persistent_volume_claim("replica", NS).status.phase == "Pending"
        custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, "volumesnapshots", snapshot_body("snap", "weights")
        )
        emu.step()
        emu.step(0.1)
        assert api.read_namespaced_persistent_volume_claim("replica", NS).status.phase == "Pending"
        emu.step(1.0)
        emu.step()
        bound = api.read_namespaced_persistent_volume_claim("replica", NS)
    assert bound.status.phase == "Bound"
    assert bound.status.access_modes == ["ReadOnlyMany"]
    warnings = [
        e.message
        for e in api.list_namespaced_event(
            NS, field_selector="involvedObject.name=replica,reason=ProvisioningFailed"
        ).items
    ]
    assert any('volumesnapshots.snapshot.storage.k8s.io "snap" not found' in m for m in warnings)
    assert any("snapshot snap is not Ready" in m for m in warnings)

    # deleting the snapshot a bound claim came from is allowed, and the claim stays bound
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "volumesnapshots", "snap")
    emu.step()
    assert api.read_namespaced_persistent_volume_claim("replica", NS).status.phase == "Bound"


def test_a_claim_smaller_than_its_snapshot_stays_pending(
    emu: KubeEmulator, custom: client.CustomObjectsApi, api: client.CoreV1Api
) -> None:
    api.create_namespaced_persistent_volume_claim(NS, claim_body("weights", "20Gi"))
    with emu.paused():
        custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, "volumesnapshots", snapshot_body("snap", "weights")
        )
        emu.step()
        emu.step(1.0)
        assert snapshot(custom, "snap")["status"]["readyToUse"] is True
        api.create_namespaced_persistent_volume_claim(
            NS, claim_body("small", "10Gi", dataSource=restore_source("snap"))
        )
        emu.step()
    assert api.read_namespaced_persistent_volume_claim("small", NS).status.phase == "Pending"
    [event] = api.list_namespaced_event(
        NS, field_selector="involvedObject.name=small,reason=ProvisioningFailed"
    ).items
    assert "is less than the size 21474836480 for the source snapshot snap" in event.message
