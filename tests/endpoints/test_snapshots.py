"""Serving a disk: the weights come from a VolumeSnapshot of the disk's claim, restored into a
new read-only claim mounted at /model (the folder as subPath); an update takes a new snapshot
and the old one goes once no replica uses it; a snapshot that fails fails the endpoint."""

import time

from endpoints import manifests
from endpoints.models import Endpoint
from endpoints.provisioning import endpoint_converge
from endpoints.scheduler import endpoints_sync
from endpoints.services import endpoint_change, endpoint_create
from starverse.core import kube
from storage.models import Disk
from storage.provisioning import disk_ensure
from tests.factories import fund, make_disk, make_user, read_existing


def _converged(endpoint_id, timeout=10.0):
    deadline = time.monotonic() + timeout
    while (outcome := endpoint_converge(endpoint_id)).wait:
        assert time.monotonic() < deadline, "the snapshot never became ready"
        time.sleep(0.05)
    return outcome.state


def _serve_disk(catalog):
    user = make_user()
    fund(user, 100_000)
    disk = make_disk(user)
    disk_ensure(disk.id)
    disk.refresh_from_db()
    endpoint, _ = endpoint_create(
        user=user,
        name="sft",
        source={"disk": disk.id, "path": "checkpoints/final"},
        engine="vllm",
        offering_id=catalog["h100x1"].id,
        min_replicas=1,
        max_replicas=1,
    )
    return disk, endpoint


def test_a_disk_is_served_from_a_snapshot_restored_read_only(catalog):
    disk, endpoint = _serve_disk(catalog)
    assert _converged(endpoint.id) == "converged"
    endpoint.refresh_from_db()
    name = manifests.snapshot_name(endpoint.id, 1)
    snapshot = read_existing("VolumeSnapshot", endpoint.k8s_namespace, name)
    assert snapshot["spec"]["source"] == {"persistentVolumeClaimName": disk.k8s_name}
    claim = read_existing("PersistentVolumeClaim", endpoint.k8s_namespace, name)
    assert claim["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert claim["spec"]["dataSource"] == {
        "apiGroup": "snapshot.storage.k8s.io",
        "kind": "VolumeSnapshot",
        "name": name,
    }
    pod = read_existing("Deployment", endpoint.k8s_namespace, endpoint.k8s_name)["spec"][
        "template"
    ]["spec"]
    assert pod["volumes"][0] == {
        "name": "model",
        "persistentVolumeClaim": {"claimName": name, "readOnly": True},
    }
    assert pod["containers"][0]["volumeMounts"][0] == {
        "name": "model",
        "mountPath": "/model",
        "readOnly": True,
        "subPath": "checkpoints/final",
    }
    # the source stays the training's, writable and attached as before
    assert Disk.objects.get(pk=disk.pk).status == "available"


def test_an_update_snapshots_again_and_the_old_snapshot_goes_with_its_replicas(catalog):
    _disk, endpoint = _serve_disk(catalog)
    _converged(endpoint.id)
    endpoint.refresh_from_db()
    endpoint_change(endpoint=endpoint, update=True)
    endpoint.refresh_from_db()
    assert (endpoint.status, endpoint.generation) == ("updating", 2)
    _converged(endpoint.id)
    namespace = endpoint.k8s_namespace
    assert read_existing("VolumeSnapshot", namespace, manifests.snapshot_name(endpoint.id, 2))
    deadline = time.monotonic() + 15
    selector = manifests.selector(endpoint)
    while True:
        endpoints_sync()
        pods = kube.pods_labelled([namespace], selector)
        generations = {p["metadata"]["labels"][manifests.GENERATION_LABEL] for p in pods}
        if generations == {"2"} and Endpoint.objects.get(pk=endpoint.pk).status == "running":
            break
        assert time.monotonic() < deadline, (generations, pods)
        time.sleep(0.05)
    _converged(endpoint.id)
    old = manifests.snapshot_name(endpoint.id, 1)
    assert kube.read("VolumeSnapshot", namespace, old) is None
    assert kube.read("PersistentVolumeClaim", namespace, old) is None


def test_a_snapshot_of_a_missing_claim_fails_the_endpoint(catalog):
    _disk, endpoint = _serve_disk(catalog)
    Endpoint.objects.filter(pk=endpoint.pk).update(source_claim="no-such-claim")
    deadline = time.monotonic() + 10
    while endpoint_converge(endpoint.id).state != "failed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    endpoint.refresh_from_db()
    assert endpoint.status == "failed"
    assert "snapshot" in endpoint.error_message
    assert kube.read("Deployment", endpoint.k8s_namespace, endpoint.k8s_name) is None
