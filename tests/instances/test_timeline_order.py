"""An instance's timeline is in the order things happened, each Kubernetes event on the run of
the pod it is about (issue 26), on the kube emulator."""

import pytest

from instances.lifecycle import instance_restart
from instances.models import Instance, InstanceEvent
from instances.provisioning import converge
from storage import provisioning
from storage.models import Disk
from tests.factories import converge_until, fund, make_user


@pytest.fixture
def client(catalog, client_for):
    user = make_user()
    fund(user, 100_000)
    return client_for(user)


def _running(client, catalog) -> Instance:
    answer = client.post(
        "/api/v1/instances",
        {"offering": catalog["h100x1"].id, "image": catalog["image"].id},
        format="json",
    )
    instance = Instance.objects.get(pk=answer.json()["id"])
    assert converge_until(converge.provision, instance.id) == "running"
    return instance


def _told(instance: Instance) -> list[tuple[str, str]]:
    return [(e.status, e.told) for e in InstanceEvent.objects.filter(instance=instance)]


def _after(told: list[tuple[str, str]], first: tuple[str, str]) -> list[tuple[str, str]]:
    return told[told.index(first) :]


def _placed(instance: Instance) -> tuple[str, str]:
    instance.refresh_from_db()
    assert instance.node is not None
    return ("provisioning", f"Placed on {instance.node.name}.")


# the new pod's start, as the emulator's kubelet reports it (its image is pulled first, or not,
# as placement found it on the node)
STARTED = [
    ("provisioning", "Created the container main."),
    ("provisioning", "Started the container main."),
    ("running", "Running: billing started."),
]


def test_a_restart_shows_the_previous_pods_killing_where_it_happened(client, catalog):
    instance = _running(client, catalog)
    assert client.post(f"/api/v1/instances/{instance.id}/stop").status_code == 202
    assert converge_until(converge.stop, instance.id) == "stopped"
    assert client.post(f"/api/v1/instances/{instance.id}/start").status_code == 202
    assert converge_until(converge.provision, instance.id) == "running"

    told = _after(_told(instance), ("stopping", "Stop requested; billing stopped."))
    assert told[:5] == [
        ("stopping", "Stop requested; billing stopped."),
        ("stopping", "Stopping the container main."),
        ("stopped", "Stopped. The disk is kept."),
        ("queued", "Start requested."),
        _placed(instance),
    ]
    assert told[-3:] == STARTED
    # the old pod's Killing is where it happened, not after the new start
    assert [text for _status, text in told].count("Stopping the container main.") == 1


def test_attaching_a_disk_to_a_running_instance_says_it_restarts_then_attaches(client, catalog):
    created = client.post("/api/v1/disks", {"name": "ckpt", "size_gb": 100}, format="json")
    disk = Disk.objects.get(pk=created.json()["id"])
    assert provisioning.disk_ensure(disk.id) == "available"
    instance = _running(client, catalog)

    answer = client.post(
        f"/api/v1/instances/{instance.id}/disks", {"disk": disk.id, "restart": True}, format="json"
    )
    assert answer.status_code == 202
    assert converge_until(converge.stop, instance.id) == "stopped"
    instance_restart(instance_id=instance.id)
    assert converge_until(converge.provision, instance.id) == "running"

    told = _after(_told(instance), ("running", "Running: billing started."))[1:]
    assert told[:6] == [
        ("stopping", "Restarting to attach the disk ckpt."),
        ("stopping", "Disk ckpt attached at /mnt/ckpt."),
        ("stopping", "Stopping the container main."),
        ("stopped", "Stopped. The disk is kept."),
        ("queued", "Start requested."),
        _placed(instance),
    ]
    assert told[-3:] == STARTED
