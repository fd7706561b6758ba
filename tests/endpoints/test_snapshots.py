"""Serving a disk: the weights come from a VolumeSnapshot of the disk's claim, restored into a
new read-only claim mounted at /model (the folder as subPath); an update takes a new snapshot
and the old one goes once no replica uses it; a snapshot that fails fails the endpoint."""

import time

from endpoints import manifests
from endpoints.models import Endpoint
from endpoints.provisioning import endpoint_converge
from endpoints.scheduler import endpoints_sync
from endpoints.services import endpoint_change, endpoint_create
from instances.lifecycle import instance_order
from instances.provisioning import converge
from starverse.core import kube
from storage.models import Disk
from storage.provisioning import disk_ensure
from tests.factories import converge_until, fund, make_disk, make_user, read_existing


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


def test_a_disk_a_running_instance_writes_to_is_served_through_the_api(catalog, client_for):
    """Fine-tune on an instance writing to a cloud disk, then serve the disk: the snapshot is
    taken of the attached claim while training goes on, and the endpoint runs."""
    user = make_user()
    fund(user, 1_000_000)
    disk = make_disk(user)
    disk_ensure(disk.id)
    instance, _ = instance_order(
        user=user, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1", disks=[disk.id]
    )
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    disk.refresh_from_db()
    pod = read_existing("Pod", instance.k8s_namespace, instance.k8s_name)
    claims = [
        (v.get("persistentVolumeClaim") or {}).get("claimName") for v in pod["spec"]["volumes"]
    ]
    assert disk.k8s_name in claims  # the training writes its checkpoints there

    answer = client_for(user).post(
        "/api/v1/endpoints",
        {
            "name": "sft",
            "source": {"disk": disk.id, "path": "checkpoints/final"},
            "engine": "vllm",
            "offering": catalog["h100x1"].id,
            "min_replicas": 1,
            "max_replicas": 1,
        },
        format="json",
        HTTP_IDEMPOTENCY_KEY="serve-the-checkpoint",
    )
    assert answer.status_code == 202, answer.content
    assert answer.json()["source"] == {"disk": disk.id, "path": "checkpoints/final"}
    endpoint = Endpoint.objects.get(pk=answer.json()["id"])
    assert _converged(endpoint.id) == "converged"
    endpoint.refresh_from_db()
    snapshot = read_existing(
        "VolumeSnapshot", endpoint.k8s_namespace, manifests.snapshot_name(endpoint.id, 1)
    )
    assert snapshot["spec"]["source"] == {"persistentVolumeClaimName": disk.k8s_name}
    deadline = time.monotonic() + 10
    while Endpoint.objects.get(pk=endpoint.pk).status != "running":
        assert time.monotonic() < deadline, "the endpoint never ran"
        endpoints_sync()
        time.sleep(0.05)
    shown = client_for(user).get(f"/api/v1/endpoints/{endpoint.id}").json()
    assert (shown["status"], shown["replicas"]["ready"]) == ("running", 1)
    # the training goes on: the disk stays attached to the running instance
    disk.refresh_from_db()
    instance.refresh_from_db()
    assert (disk.status, disk.instance_id, instance.status) == ("attached", instance.id, "running")
