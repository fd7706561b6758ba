"""Cloning an instance (POST /instances/{id}/clone): a new order through the order path whose
first start restores its system disk and own disk from CSI snapshots of the source's volumes,
the source running on. Played on the kube emulator, whose snapshots copy a volume's files and
whose restored claims start from that copy."""

import re

from django.test import Client

from compute.models import Offering
from instances.models import Instance, InstanceEvent
from instances.provisioning import converge, manifests
from starverse.core import kube
from tests.factories import converge_until, fund, host_path, make_instance, make_user

PACKAGE = "/usr/local/lib/python3.10/dist-packages/flash_attn/__init__.py"
CHECKPOINT = "/root/data/ckpt/step-100.pt"


def _running(client, catalog, **order) -> Instance:
    body = client.post(
        "/api/v1/instances",
        {"offering": catalog["h100x1"].id, "image": catalog["image"].id, **order},
        format="json",
    ).json()
    assert converge_until(converge.provision, body["id"]) == "running"
    return Instance.objects.get(pk=body["id"])


def _write(emu, instance: Instance, path: str, text: str) -> None:
    place = host_path(emu, instance, path)
    place.parent.mkdir(parents=True, exist_ok=True)
    place.write_text(text)


def test_a_clone_of_a_running_instance_has_its_files_image_and_settings(renter, catalog, cluster):
    _user, client = renter
    source = _running(client, catalog, ports=[7860], mirrors=False, name="sd")
    _write(cluster, source, PACKAGE, "__version__ = '2.5.6'\n")
    _write(cluster, source, CHECKPOINT, "weights\n")

    response = client.post(
        f"/api/v1/instances/{source.id}/clone", {}, format="json", HTTP_IDEMPOTENCY_KEY="c1"
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["cloned_from"], body["consistency"]) == (source.id, "crash_consistent")
    clone_id = body["instance"]["id"]
    assert body["instance"]["name"] == "sd (clone)"
    # the same key answers the same clone
    again = client.post(
        f"/api/v1/instances/{source.id}/clone", {}, format="json", HTTP_IDEMPOTENCY_KEY="c1"
    )
    assert again.json()["instance"]["id"] == clone_id
    assert Instance.objects.filter(cloned_from=source.id).count() == 1

    assert converge_until(converge.provision, clone_id) == "running"
    clone = Instance.objects.get(pk=clone_id)
    assert (clone.image_id, clone.offering_id, clone.region_id) == (
        source.image_id,
        source.offering_id,
        source.region_id,
    )
    assert (clone.ports, clone.mirrors, clone.cloned_from) == ([7860], False, source.id)
    assert host_path(cluster, clone, PACKAGE).read_text() == "__version__ = '2.5.6'\n"
    assert host_path(cluster, clone, CHECKPOINT).read_text() == "weights\n"
    # the source ran on, and the two are copies from now on
    source.refresh_from_db()
    assert source.status == "running"
    _write(cluster, source, CHECKPOINT, "step 200\n")
    assert host_path(cluster, clone, CHECKPOINT).read_text() == "weights\n"
    # its snapshots went once its claims held their copy; the claims say where they came from
    for claim, _source_claim in manifests.clone_sources(clone):
        assert kube.read("VolumeSnapshot", clone.k8s_namespace, claim) is None
        restored = kube.read("PersistentVolumeClaim", clone.k8s_namespace, claim)
        assert restored is not None
        assert restored["spec"]["dataSource"]["name"] == claim


def test_a_stopped_clone_starts_again_on_its_own_disks(renter, catalog, cluster):
    _user, client = renter
    source = _running(client, catalog)
    client.post(f"/api/v1/instances/{source.id}/stop")
    assert converge_until(converge.stop, source.id) == "stopped"
    body = client.post(f"/api/v1/instances/{source.id}/clone", {}, format="json").json()
    assert body["consistency"] == "consistent"
    clone_id = body["instance"]["id"]
    assert converge_until(converge.provision, clone_id) == "running"
    clone = Instance.objects.get(pk=clone_id)
    _write(cluster, clone, CHECKPOINT, "the clone's own\n")
    client.post(f"/api/v1/instances/{clone_id}/stop")
    assert converge_until(converge.stop, clone_id) == "stopped"
    # the source goes; the clone's disks are its own
    client.delete(f"/api/v1/instances/{source.id}")
    assert converge_until(converge.terminate, source.id) == "terminated"
    client.post(f"/api/v1/instances/{clone_id}/start")
    assert converge_until(converge.provision, clone_id) == "running"
    clone.refresh_from_db()
    assert host_path(cluster, clone, CHECKPOINT).read_text() == "the clone's own\n"


def test_a_clone_whose_source_lost_its_disks_fails_saying_why(renter, catalog, cluster):
    _user, client = renter
    source = _running(client, catalog)
    client.post(f"/api/v1/instances/{source.id}/stop")
    assert converge_until(converge.stop, source.id) == "stopped"
    clone_id = client.post(f"/api/v1/instances/{source.id}/clone", {}, format="json").json()[
        "instance"
    ]["id"]
    # the source's system disk is gone (deleted by hand) before the clone's first start copies it
    kube.delete(
        "PersistentVolumeClaim", source.k8s_namespace, manifests.system_disk_name(source.id)
    )
    assert converge_until(converge.provision, clone_id) == "failed"
    clone = Instance.objects.get(pk=clone_id)
    assert clone.error_message.startswith(f"The copy of the disks of {source.id} failed: ")
    assert clone.error_message.endswith(
        "It was not billed; clone it again while it is running or stopped."
    )
    failed = InstanceEvent.objects.filter(instance=clone, status="failed").get()
    assert failed.text == clone.error_message


def test_a_clone_is_refused_elsewhere_smaller_or_from_a_wrong_state(renter, catalog, cluster):
    user, client = renter
    smaller = catalog["h100x8"]
    Offering.objects.filter(pk=smaller.pk).update(local_disk_gb=1)
    source = _running(client, catalog)
    queued = make_instance(user)  # provisioning: not yet cloneable
    before = Instance.objects.count()
    for path, body, status, code in [
        (source.id, {"offering": smaller.id}, 400, "clone_disks_too_small"),
        (source.id, {"region": "elsewhere"}, 400, "clone_other_region"),
        (queued.id, {}, 409, "wrong_state"),
    ]:
        response = client.post(f"/api/v1/instances/{path}/clone", body, format="json")
        assert response.status_code == status, response.content
        assert response.json()["code"] == code
    # a dry run answers the order's quote and makes nothing
    response = client.post(f"/api/v1/instances/{source.id}/clone", {"dry_run": True}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["quote"]["price_per_hour_fen"] == source.offering.price_per_hour_fen
    assert Instance.objects.count() == before


def test_another_tenants_instance_is_not_found(renter, catalog, cluster, client_for):
    _user, client = renter
    source = _running(client, catalog)
    stranger = make_user()
    fund(stranger, 100_000)
    response = client_for(stranger).post(f"/api/v1/instances/{source.id}/clone", {}, format="json")
    assert response.status_code == 404
    assert not Instance.objects.filter(cloned_from=source.id).exists()


def test_the_console_clones_once_from_the_instances_page(renter, catalog, cluster):
    user, api = renter
    source = _running(api, catalog, name="sd")
    client = Client()
    client.force_login(user)
    page = client.get(f"/console/instances/{source.id}/").content.decode()
    assert f'action="/console/instances/{source.id}/clone/"' in page
    assert "Clone “sd” while it runs?" in page  # the copy of a running one is crash-consistent
    token = re.search(r'name="token" value="([^"]+)"', page)
    assert token is not None
    path = f"/console/instances/{source.id}/clone/"
    first = client.post(path, {"token": token.group(1)})
    again = client.post(path, {"token": token.group(1)})  # the same page's form, sent twice
    [clone] = Instance.objects.filter(cloned_from=source.id)
    assert first["Location"] == again["Location"] == f"/console/instances/{clone.id}/"
    assert clone.name == "sd (clone)"
    # a queued or provisioning one offers no clone, and refuses one saying why
    assert converge_until(converge.provision, clone.id) == "running"
    client.post(f"/console/instances/{source.id}/stop/")
    assert (
        'data-action="clone"' not in client.get(f"/console/instances/{source.id}/").content.decode()
    )
    refused = client.post(path, {"token": "another-token-of-16"}, follow=True)
    assert "Only a running or stopped instance can be cloned" in refused.content.decode()
    assert Instance.objects.filter(cloned_from=source.id).count() == 1
