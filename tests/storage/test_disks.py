"""Cloud disks through the API, the real kubernetes client and the local cluster: they outlive
instances and re-attach elsewhere (checkpoint resume), attach/detach rules, another tenant's
disk is a 404, and node loss re-places an instance with the same disks."""

import pytest
from django.utils import timezone

from billing.models import LedgerTransaction
from fleet.models import Node
from fleet.services import node_transition
from instances.lifecycle import instance_restart
from instances.models import Instance, InstanceEvent
from instances.provisioning import converge, manifests, reconcile
from starverse.core import kube
from storage import provisioning
from storage.models import Disk
from tests.factories import converge_until, fund, make_user, read_existing


@pytest.fixture
def renter(catalog, client_for):
    user = make_user()
    fund(user, 100_000)
    return user, client_for(user)


def _order(client, offering, image, **extra):
    response = client.post(
        "/api/v1/instances", {"offering": offering.id, "image": image.id, **extra}, format="json"
    )
    assert response.status_code == 202, response.json()
    return Instance.objects.get(pk=response.json()["id"])


def _disk(client, name="ckpt", size_gb=100):
    response = client.post("/api/v1/disks", {"name": name, "size_gb": size_gb}, format="json")
    assert response.status_code == 201, response.json()
    disk = Disk.objects.get(pk=response.json()["id"])
    assert provisioning.disk_ensure(disk.id) == "available"
    disk.refresh_from_db()
    return disk


def _claim(disk):
    return kube.read("PersistentVolumeClaim", disk.k8s_namespace, disk.k8s_name)


def _pod(instance):
    instance.refresh_from_db()
    return kube.read("Pod", instance.k8s_namespace, instance.k8s_name)


def _mounts(pod):
    container = pod["spec"]["containers"][0]
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    return {m["mountPath"]: claims.get(m["name"]) for m in container["volumeMounts"]}


def test_create_list_resize_and_the_first_day_is_charged(renter, catalog):
    _user, client = renter
    disk = _disk(client, "ckpt", 100)

    claim = _claim(disk)
    assert claim["spec"]["resources"]["requests"]["storage"] == "100Gi"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert not claim["metadata"].get("ownerReferences")
    assert claim["metadata"]["labels"]["starverse.io/disk"] == disk.id.lower().replace("_", "-")
    day = timezone.localdate().isoformat()
    charge = LedgerTransaction.objects.get(idempotency_key=f"storage:{disk.id}:{day}")
    assert charge.amount_fen == -100  # 100 GB × 1 fen per GB-day
    listed = client.get("/api/v1/disks").json()["results"]
    assert [(d["id"], d["status"], d["attached_to"], d["mount_path"]) for d in listed] == [
        (disk.id, "available", None, "/mnt/ckpt")
    ]

    grown = client.patch(f"/api/v1/disks/{disk.id}", {"size_gb": 250}, format="json")
    assert grown.status_code == 200 and grown.json()["size_gb"] == 250
    provisioning.disk_ensure(disk.id)
    assert _claim(disk)["spec"]["resources"]["requests"]["storage"] == "250Gi"
    shrink = client.patch(f"/api/v1/disks/{disk.id}", {"size_gb": 10}, format="json")
    assert (shrink.status_code, shrink.json()["code"]) == (400, "disk_shrink")
    same_name = client.post("/api/v1/disks", {"name": "ckpt", "size_gb": 5}, format="json")
    assert (same_name.status_code, same_name.json()["code"]) == (409, "disk_name_taken")
    bad_name = client.post("/api/v1/disks", {"name": "../etc", "size_gb": 5}, format="json")
    assert (bad_name.status_code, bad_name.json()["code"]) == (400, "disk_name")
    too_big = client.post("/api/v1/disks", {"name": "big", "size_gb": 10**6}, format="json")
    assert (too_big.status_code, too_big.json()["code"]) == (400, "disk_size")


def test_a_disk_the_balance_cannot_pay_a_day_of_is_refused(catalog, client_for):
    client = client_for(make_user())  # ¥10 of trial credit
    response = client.post("/api/v1/disks", {"name": "huge", "size_gb": 5000}, format="json")

    assert response.status_code == 402
    assert "¥50.00" in response.json()["detail"]
    assert not Disk.objects.exists()


def test_checkpoint_resume_the_disk_outlives_the_instance_and_mounts_elsewhere(renter, catalog):
    _user, client = renter
    disk = _disk(client, "ckpt")
    uid = _claim(disk)["metadata"]["uid"]

    first = _order(client, catalog["h100x1"], catalog["image"], disks=[disk.id])
    assert converge_until(converge.provision, first.id) == "running"
    assert _mounts(_pod(first))["/mnt/ckpt"] == disk.k8s_name
    detail = client.get(f"/api/v1/instances/{first.id}").json()
    assert detail["disks"] == [disk.id]
    attached = client.get(f"/api/v1/disks/{disk.id}").json()
    assert (attached["status"], attached["attached_to"]) == ("attached", first.id)
    refused = client.delete(f"/api/v1/disks/{disk.id}")
    assert (refused.status_code, refused.json()["code"]) == (409, "disk_attached")
    other = client.post(
        "/api/v1/instances",
        {"offering": catalog["h100x1"].id, "image": catalog["image"].id, "disks": [disk.id]},
        format="json",
    )
    assert (other.status_code, other.json()["code"]) == (409, "disk_attached")

    client.delete(f"/api/v1/instances/{first.id}")
    assert converge_until(converge.terminate, first.id) == "terminated"
    disk.refresh_from_db()
    assert (disk.status, disk.instance_id) == ("available", None)
    assert _claim(disk)["metadata"]["uid"] == uid  # the data is still there
    assert InstanceEvent.objects.filter(instance=first, message__contains="detached").exists()

    # the old node is busy now, so the resumed run lands on another one
    first.refresh_from_db()
    old_node = Node.objects.get(pk=first.node_id)
    node_transition(node=old_node, to="cordoned", reason="maintenance")
    second = _order(client, catalog["h100x1"], catalog["image"], disks=[disk.id])
    assert converge_until(converge.provision, second.id) == "running"
    second.refresh_from_db()
    assert second.node_id != old_node.pk
    assert _mounts(_pod(second))["/mnt/ckpt"] == disk.k8s_name
    assert _claim(disk)["metadata"]["uid"] == uid


def test_attach_and_detach_need_a_stop_or_a_confirmed_restart(renter, catalog):
    _user, client = renter
    one, two = _disk(client, "data"), _disk(client, "ckpt")
    instance = _order(client, catalog["h100x1"], catalog["image"])
    converge_until(converge.provision, instance.id)

    refused = client.post(f"/api/v1/instances/{instance.id}/disks", {"disk": one.id}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (409, "restart_required")
    one.refresh_from_db()
    assert one.instance_id is None  # nothing changed

    client.post(f"/api/v1/instances/{instance.id}/stop")
    converge_until(converge.stop, instance.id)
    attached = client.post(
        f"/api/v1/instances/{instance.id}/disks", {"disk": one.id}, format="json"
    )
    assert attached.status_code == 202 and attached.json()["disks"] == [one.id]
    client.post(f"/api/v1/instances/{instance.id}/start")
    converge_until(converge.provision, instance.id)
    assert "/mnt/data" in _mounts(_pod(instance))

    restarting = client.post(
        f"/api/v1/instances/{instance.id}/disks", {"disk": two.id, "restart": True}, format="json"
    )
    assert restarting.json()["status"] == "stopping"
    converge_until(converge.stop, instance.id)
    instance_restart(instance_id=instance.id)
    assert converge_until(converge.provision, instance.id) == "running"
    assert {"/mnt/data", "/mnt/ckpt"} <= set(_mounts(_pod(instance)))

    client.post(f"/api/v1/instances/{instance.id}/stop")
    converge_until(converge.stop, instance.id)
    detached = client.delete(f"/api/v1/instances/{instance.id}/disks/{one.id}")
    assert detached.status_code == 202 and detached.json()["disks"] == [two.id]
    assert client.delete(f"/api/v1/instances/{instance.id}/disks/{one.id}").status_code == 404


def test_stop_start_keeps_the_instance_disk_and_terminate_can_keep_it(renter, catalog):
    _user, client = renter
    instance = _order(client, catalog["h100x1"], catalog["image"])
    converge_until(converge.provision, instance.id)
    instance.refresh_from_db()
    claim_name = manifests.disk_name(instance.id)
    uid = read_existing("PersistentVolumeClaim", instance.k8s_namespace, claim_name)["metadata"][
        "uid"
    ]

    client.post(f"/api/v1/instances/{instance.id}/stop")
    converge_until(converge.stop, instance.id)
    client.post(f"/api/v1/instances/{instance.id}/start")
    converge_until(converge.provision, instance.id)
    claim = read_existing("PersistentVolumeClaim", instance.k8s_namespace, claim_name)
    assert claim["metadata"]["uid"] == uid

    assert client.delete(f"/api/v1/instances/{instance.id}?keep_disk=maybe").status_code == 400
    client.delete(f"/api/v1/instances/{instance.id}?keep_disk=true")
    assert converge_until(converge.terminate, instance.id) == "terminated"
    kept = Disk.objects.get(origin=instance.id)
    assert (kept.k8s_name, kept.status, kept.size_gb) == (claim_name, "available", 1000)
    provisioning.disk_ensure(kept.id)
    claim = _claim(kept)
    assert claim["metadata"]["uid"] == uid
    assert "starverse.io/instance" not in claim["metadata"]["labels"]
    assert claim["metadata"]["labels"]["starverse.io/disk"]
    reconcile.reconcile()
    assert _claim(kept) is not None  # the reconcile loop never collects a disk's claim


def test_another_tenant_cannot_read_attach_or_delete_a_disk(renter, catalog, client_for):
    _user, client = renter
    disk = _disk(client)
    stranger = make_user()
    fund(stranger, 100_000)
    theirs = client_for(stranger)
    instance = _order(theirs, catalog["h100x1"], catalog["image"])

    assert theirs.get(f"/api/v1/disks/{disk.id}").status_code == 404
    assert theirs.delete(f"/api/v1/disks/{disk.id}").status_code == 404
    assert (
        theirs.patch(f"/api/v1/disks/{disk.id}", {"size_gb": 500}, format="json").status_code == 404
    )
    attach = theirs.post(f"/api/v1/instances/{instance.id}/disks", {"disk": disk.id}, format="json")
    assert attach.status_code == 404
    order = theirs.post(
        "/api/v1/instances",
        {"offering": catalog["h100x1"].id, "image": catalog["image"].id, "disks": [disk.id]},
        format="json",
    )
    assert order.status_code == 404
    assert theirs.get("/api/v1/disks").json()["results"] == []
    disk.refresh_from_db()
    assert (disk.status, disk.size_gb, disk.instance_id) == ("available", 100, None)


def test_delete_removes_the_claim(renter, catalog):
    _user, client = renter
    disk = _disk(client)

    assert client.delete(f"/api/v1/disks/{disk.id}").json()["status"] == "deleting"
    assert provisioning.disk_remove(disk.id) == "deleted"
    assert _claim(disk) is None
    assert client.get(f"/api/v1/disks/{disk.id}").status_code == 404
    assert _disk(client).name == "ckpt"  # the name is free again


def test_node_loss_places_the_instance_again_with_the_same_disks(
    renter, catalog, cluster, django_capture_on_commit_callbacks
):
    _user, client = renter
    disk = _disk(client, "ckpt")
    instance = _order(client, catalog["h100x1"], catalog["image"], disks=[disk.id])
    converge_until(converge.provision, instance.id)
    instance.refresh_from_db()
    lost = instance.node

    cluster.lose_node(lost.name)
    # The fleet cordons the node on the cluster and tells the instances app after its
    # transaction commits; run those two tasks (the provisioning they start in turn is driven
    # below, step by step).
    with django_capture_on_commit_callbacks() as after_commit:
        node_transition(node=lost, to="down", reason="heartbeat lost: no report for 61 s")
    assert [callback.args[0] for callback in after_commit] == [
        "fleet.tasks.mirror_node_schedulable",
        "instances.tasks.node_changed",
    ]
    for callback in after_commit:
        callback()

    instance.refresh_from_db()
    assert instance.status == "provisioning" and instance.node_id != lost.pk
    assert converge_until(converge.provision, instance.id) == "running"
    pod = _pod(instance)
    assert pod["spec"]["nodeName"] == instance.node.name
    assert _mounts(pod)["/mnt/ckpt"] == disk.k8s_name
    messages = [e.text for e in instance.events.order_by("at", "id")]
    assert any("Billing paused at" in m and lost.name in m for m in messages)
    assert messages[-1] == "Running: billing started."
    instance.refresh_from_db()
    assert instance.session == 2  # a new billing session from the new start


def test_whole_nodes_do_not_move_by_default(
    renter, catalog, cluster, django_capture_on_commit_callbacks
):
    _user, client = renter
    instance = _order(client, catalog["h100_node"], catalog["image"])
    converge_until(converge.provision, instance.id)
    instance.refresh_from_db()

    # The fleet tells the instances app after its transaction commits.
    with django_capture_on_commit_callbacks(execute=True):
        node_transition(node=instance.node, to="down", reason="XID 79")

    instance.refresh_from_db()
    assert instance.auto_recover is False and instance.status == "failed"


def test_the_shared_nas_is_mounted_everywhere_and_its_usage_is_measured(renter, catalog, cluster):
    from storage.models import SharedStorage

    _user, client = renter
    assert client.get("/api/v1/nas").status_code == 404
    created = client.put("/api/v1/nas", {"size_gb": 500}, format="json")
    assert created.status_code == 201
    nas = SharedStorage.objects.get(pk=created.json()["id"])
    assert provisioning.nas_ensure(nas.id) == "ready"
    first = _order(client, catalog["h100x1"], catalog["image"])
    second = _order(client, catalog["a100_node"], catalog["image"])
    for instance in (first, second):
        converge_until(converge.provision, instance.id)
        assert _mounts(_pod(instance))["/nas"] == nas.k8s_name
    namespace = kube.namespace_name(nas.tenant_id)
    claim = read_existing("PersistentVolumeClaim", namespace, nas.k8s_name)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]

    cluster.set_volume_usage(namespace, nas.k8s_name, 123 * 2**30)
    assert provisioning.nas_usage_refresh() == 1

    shown = client.get("/api/v1/nas").json()
    assert (shown["used_bytes"], shown["size_gb"], shown["mount_path"]) == (
        123 * 2**30,
        500,
        "/nas",
    )
    busy = client.delete("/api/v1/nas")
    assert (busy.status_code, busy.json()["code"]) == (409, "nas_in_use")


def test_concurrent_orders_for_one_disk_attach_it_once(transactional_db, cluster):
    from django.core.management import call_command

    from compute.models import Offering
    from fleet.services import nodes_sync_from_cluster
    from instances.lifecycle import instance_order
    from starverse.core.errors import Conflict
    from storage.disks import disk_create
    from tests.conftest import run_threads

    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    offering = Offering.objects.get(name="1× RTX 4090 24GB")
    user = make_user()
    fund(user, 100_000)
    disk = disk_create(user=user, name="ckpt", size_gb=10)

    results = run_threads(
        8,
        lambda i: instance_order(
            user=user, offering_id=offering.id, image_id="pytorch-2.1", disks=[disk.id]
        )[0],
    )

    placed = [r for r in results if isinstance(r, Instance)]
    assert len(placed) == 1, results
    assert all(
        isinstance(r, Conflict) and r.code == "disk_attached" for r in results if r not in placed
    )
    disk.refresh_from_db()
    assert disk.instance_id == placed[0].id
    assert Instance.objects.count() == 1  # the refused orders left nothing behind


def test_a_claim_task_queued_under_its_name_from_before_the_split_still_runs(renter, cluster):
    from starverse.core.dispatch import send

    _user, client = renter
    created = client.post("/api/v1/disks", {"name": "older", "size_gb": 10}, format="json")
    disk_id = created.json()["id"]  # its own ensure task waits for a commit that never comes
    assert Disk.objects.get(pk=disk_id).status == "creating"

    send("instances.tasks.ensure_disk", disk_id)  # as a message from the previous release

    assert Disk.objects.get(pk=disk_id).status == "available"
