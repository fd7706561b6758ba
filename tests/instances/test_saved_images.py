"""Save as image: an instance's system disk becomes an image of its tenant, pushed by a build
pod in the tenant namespace (never the web tier) as one layer on top of the instance's image to
the operator's registry under the tenant's own repository; saving → ready with its size, then
ordered like a catalogue image, its instances' system disks seeded from it. Another tenant
never sees, saves from or orders it. Played on the kube emulator (devstack/kube/saving.py)."""

import time

import pytest

from compute.images import image_transition
from compute.models import Image
from instances import tasks
from instances.models import Instance, InstanceEvent
from instances.provisioning import converge, saving
from starverse.core import kube
from tests.factories import converge_until, fund, host_path, make_user

PACKAGE = "/usr/local/lib/python3.10/dist-packages/flash_attn/__init__.py"
CONTENT = "__version__ = '2.5.6'\n"


def _order(client, offering, image_id: str) -> Instance:
    body = client.post(
        "/api/v1/instances", {"offering": offering.id, "image": image_id}, format="json"
    ).json()
    assert converge_until(converge.provision, body["id"]) == "running"
    return Instance.objects.get(pk=body["id"])


def _saved(image_id: str, timeout: float = 10.0) -> Image:
    """Run the save's converge step as its retrying task does, until the image is saved."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            saving.image_save_converge(image_id)
            return Image.objects.get(pk=image_id)
        except saving.StillSaving:
            assert time.monotonic() < deadline, "the build pod did not end"
            time.sleep(0.02)


def _installed(cluster, client, catalog) -> Instance:
    instance = _order(client, catalog["h100x1"], catalog["image"].id)
    place = host_path(cluster, instance, PACKAGE)
    place.parent.mkdir(parents=True)
    place.write_text(CONTENT)
    return instance


def test_a_stopped_instance_saved_as_an_image_orders_two_more_with_its_files(
    renter, catalog, cluster
):
    user, client = renter
    catalog["image"].size_bytes = 7_000_000_000
    catalog["image"].save(update_fields=["size_bytes"])
    instance = _installed(cluster, client, catalog)
    client.post(f"/api/v1/instances/{instance.id}/stop")
    assert converge_until(converge.stop, instance.id) == "stopped"

    answer = client.post(
        f"/api/v1/instances/{instance.id}/image",
        {"name": "My env"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="save-1",
    )

    assert answer.status_code == 202
    body = answer.json()
    tenant = kube.tenant_label(user.tenant_id)
    tag = body["id"].split("_", 1)[1].lower()
    assert (body["name"], body["status"], body["size_bytes"], body["warning"]) == (
        "My env",
        "saving",
        None,
        "",
    )
    assert body["reference"] == f"127.0.0.1:5000/t-{tenant}/my-env:{tag}"
    assert body["base"] == catalog["image"].container_image
    again = client.post(
        f"/api/v1/instances/{instance.id}/image",
        {"name": "My env"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="save-1",
    )
    assert (again.status_code, again.json()["id"]) == (202, body["id"])
    assert Image.objects.filter(tenant_id=user.tenant_id).count() == 1
    listed = client.get("/api/v1/images?owner=me").json()["results"]
    assert [(i["id"], i["status"]) for i in listed] == [(body["id"], "saving")]
    # not orderable until saved
    early = client.post(
        "/api/v1/instances", {"offering": catalog["h100x1"].id, "image": body["id"]}, format="json"
    )
    assert early.json()["code"] == "unknown_image"

    image = _saved(body["id"])

    assert image.status == "ready"
    assert image.size_bytes == 7_000_000_000 + len(CONTENT)
    # a second run of the follow-up changes nothing: ready is final
    assert image_transition(image.id, "failed", error="late") is False
    assert Image.objects.get(pk=image.id).status == "ready"
    assert kube.read("Pod", instance.k8s_namespace, saving.build_pod_name(image.id)) is None
    assert cluster.images.layers[image.container_image][-1] == len(CONTENT)
    assert client.get(f"/api/v1/images/{image.id}").json()["size_bytes"] == image.size_bytes
    for _ in range(2):
        copy = _order(client, catalog["h100x1"], image.id)
        pod = kube.read("Pod", copy.k8s_namespace, copy.k8s_name)
        assert pod is not None
        assert pod["spec"]["containers"][0]["image"] == image.container_image
        assert host_path(cluster, copy, PACKAGE).read_text() == CONTENT


def test_a_running_instance_saves_with_a_warning_on_its_own_node(
    renter, catalog, cluster, settings
):
    _user, client = renter
    instance = _installed(cluster, client, catalog)

    answer = client.post(f"/api/v1/instances/{instance.id}/image", {"name": "live"}, format="json")

    assert answer.status_code == 202
    assert "stop it first" in answer.json()["warning"]
    image_id = answer.json()["id"]
    with cluster.paused():  # the build pod as made, before it ends
        with pytest.raises(saving.StillSaving):
            saving.image_save_converge(image_id)
        pod = kube.read("Pod", instance.k8s_namespace, saving.build_pod_name(image_id))
    assert pod is not None
    assert instance.node is not None
    spec = pod["spec"]
    assert spec["nodeName"] == instance.node.name
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    tools, layer = spec["initContainers"]
    [push] = spec["containers"]
    # the layer step runs from the platform's toolset (so a brought image is saved too), in the
    # instance's own image (whose directories it compares the system disk against)
    assert tools["image"] == settings.INIT_IMAGE
    assert layer["command"][0] == "/starverse-tools/bin/starverse-save-layer"
    assert {"name": "starverse-tools", "mountPath": "/starverse-tools", "readOnly": True} in (
        layer["volumeMounts"]
    )
    assert layer["image"] == catalog["image"].container_image
    assert layer["volumeMounts"][0] == {
        "name": "system",
        "mountPath": "/starverse-system",
        "readOnly": True,
    }
    for container in (tools, layer, push):
        context = container["securityContext"]
        assert context["privileged"] is False and context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
    assert push["image"] == "gcr.io/go-containerregistry/crane:v0.20.2"
    assert _saved(image_id).status == "ready"


def test_the_push_credential_is_mounted_in_the_push_container_only(
    renter, catalog, cluster, settings
):
    user, client = renter
    settings.IMAGE_REGISTRY_USERNAME, settings.IMAGE_REGISTRY_PASSWORD = "pusher", "p4ss"
    instance = _installed(cluster, client, catalog)
    image_id = client.post(
        f"/api/v1/instances/{instance.id}/image", {"name": "env"}, format="json"
    ).json()["id"]

    with cluster.paused():
        with pytest.raises(saving.StillSaving):
            saving.image_save_converge(image_id)
        pod = kube.read("Pod", instance.k8s_namespace, saving.build_pod_name(image_id))

    assert pod is not None
    (tools, layer), [push] = pod["spec"]["initContainers"], pod["spec"]["containers"]
    for container in (tools, layer):
        assert "push" not in [m["name"] for m in container["volumeMounts"]]
    assert {"name": "push", "mountPath": "/etc/starverse/push", "readOnly": True} in push[
        "volumeMounts"
    ]
    assert {"name": "DOCKER_CONFIG", "value": "/etc/starverse/push"} in push["env"]
    secret = kube.read("Secret", kube.namespace_name(user.tenant_id), saving.PUSH_SECRET)
    assert secret is not None and secret["type"] == "kubernetes.io/dockerconfigjson"
    assert "p4ss" not in client.get(f"/api/v1/images/{image_id}").content.decode()


def test_another_tenant_neither_saves_nor_sees_nor_orders_it(renter, catalog, cluster, client_for):
    _user, client = renter
    instance = _installed(cluster, client, catalog)
    image_id = client.post(
        f"/api/v1/instances/{instance.id}/image", {"name": "mine"}, format="json"
    ).json()["id"]
    assert _saved(image_id).status == "ready"
    stranger = make_user()
    fund(stranger, 100_000)
    theirs = client_for(stranger)

    refused = theirs.post(f"/api/v1/instances/{instance.id}/image", {"name": "x"}, format="json")
    assert refused.status_code == 404
    assert theirs.get(f"/api/v1/images/{image_id}").status_code == 404
    assert theirs.get("/api/v1/images?owner=me").json()["results"] == []
    assert image_id not in [i["id"] for i in theirs.get("/api/v1/images").json()["results"]]
    ordered = theirs.post(
        "/api/v1/instances", {"offering": catalog["h100x1"].id, "image": image_id}, format="json"
    )
    assert ordered.status_code == 400 and ordered.json()["code"] == "unknown_image"
    assert not Image.objects.filter(tenant_id=stranger.tenant_id).exists()
    assert not Instance.objects.filter(tenant_id=stranger.tenant_id).exists()


def test_an_instance_being_terminated_cannot_be_saved_and_a_name_is_not_taken_twice(
    renter, catalog, cluster
):
    user, client = renter
    instance = _installed(cluster, client, catalog)
    first = client.post(f"/api/v1/instances/{instance.id}/image", {"name": "env"}, format="json")
    assert first.status_code == 202
    taken = client.post(f"/api/v1/instances/{instance.id}/image", {"name": "env"}, format="json")
    assert (taken.status_code, taken.json()["code"]) == (409, "image_name_taken")
    client.delete(f"/api/v1/instances/{instance.id}")

    refused = client.post(f"/api/v1/instances/{instance.id}/image", {"name": "late"}, format="json")

    assert (refused.status_code, refused.json()["code"]) == (409, "wrong_state")
    assert list(Image.objects.filter(tenant_id=user.tenant_id).values_list("name", flat=True)) == [
        "env"
    ]
    # the first save, not begun before the instance went: failed, saying why
    image = _saved(first.json()["id"])
    assert image.status == "failed"
    assert "terminated before its image was saved" in image.error_message


def test_the_console_saves_an_instance_and_lists_the_image_with_its_status_and_size(
    renter, catalog, cluster, client_for
):
    from django.test import Client

    user, client = renter
    instance = _installed(cluster, client, catalog)
    browser = Client()
    browser.force_login(user)
    page = browser.get(f"/console/instances/{instance.id}/").content.decode()
    assert f'action="/console/instances/{instance.id}/image/"' in page
    assert "data-save-warning" in page  # running: it says what that means

    answer = browser.post(f"/console/instances/{instance.id}/image/", {"name": "from console"})

    assert answer.status_code == 302 and answer["Location"] == "/console/images/"
    image = Image.objects.get(tenant_id=user.tenant_id)
    assert (image.name, image.status, image.saved_from) == ("from console", "saving", instance.id)
    listed = browser.get("/console/images/").content.decode()
    assert f'data-image="{image.id}"' in listed and "Saving" in listed
    size = _saved(image.id).size_bytes
    assert size == catalog["image"].size_bytes + len(CONTENT)
    listed = browser.get("/console/images/").content.decode()
    assert "Ready" in listed and f"{size / 1e9:.1f} GB" in listed
    stranger = Client()
    stranger.force_login(make_user())
    assert (
        stranger.post(f"/console/instances/{instance.id}/image/", {"name": "x"}).status_code == 404
    )
    assert image.id not in stranger.get("/console/images/").content.decode()
    assert stranger.post(f"/console/images/{image.id}/delete/").status_code == 404
    assert Image.objects.filter(tenant_id=user.tenant_id).count() == 1


def test_a_teams_saved_image_is_ordered_by_its_members(catalog, cluster, settings):
    from instances.images import image_save
    from instances.lifecycle import instance_order
    from tests.factories import make_instance, make_team_with_budget
    from tests.teams.test_team_changes import acting

    settings.MAX_RUNNING_GPUS = 32
    ana, bob, team = make_team_with_budget()
    fund(acting(ana, team, "owner"), 100_000)
    instance = make_instance(ana, "stopped", cluster=cluster)
    image = image_save(user=ana, instance=instance, name="lab env").image
    assert _saved(image.id).status == "ready"

    ordered, _created = instance_order(
        user=acting(bob, team, "member"), offering_id=catalog["h100x1"].id, image_id=image.id
    )

    assert (ordered.tenant_id, ordered.image_id) == (team.pk, image.id)
    assert Image.objects.usable_by(make_user().tenant_id).filter(pk=image.id).exists() is False


def test_the_beat_follows_a_saving_image_to_ready_and_the_timeline_tells_each_step(
    renter, catalog, cluster, settings
):
    """instances.tasks.follow_saving_images (every minute) takes up each image still saving,
    as if its own task were lost: the build pod is made and followed until the image is ready."""
    _user, client = renter
    instance = _installed(cluster, client, catalog)
    client.post(f"/api/v1/instances/{instance.id}/stop")
    assert converge_until(converge.stop, instance.id) == "stopped"
    body = client.post(
        f"/api/v1/instances/{instance.id}/image", {"name": "beat env"}, format="json"
    ).json()
    assert Image.objects.get(pk=body["id"]).status == "saving"  # its task never ran here

    settings.PROVISIONING_POLL_S = 0
    deadline = time.monotonic() + 10
    while Image.objects.get(pk=body["id"]).status == "saving":
        assert time.monotonic() < deadline, "the beat did not follow the image to its end"
        tasks.follow_saving_images()
        time.sleep(0.05)

    image = Image.objects.get(pk=body["id"])
    assert image.status == "ready"
    assert kube.read("Pod", instance.k8s_namespace, saving.build_pod_name(image.id)) is None
    told = [e.text for e in InstanceEvent.objects.filter(instance=instance).order_by("at", "id")]
    started = f"Saving as the image beat env started ({image.id})."
    saved = f"The image beat env is saved ({image.size_bytes / 10**9:.1f} GB) and can be ordered."
    assert told.count(started) == 1 and told.count(saved) == 1
    assert told.index(started) < told.index(saved)
    # the beat again: nothing more is saved or told
    tasks.follow_saving_images()
    assert [e.text for e in InstanceEvent.objects.filter(instance=instance)].count(saved) == 1


def test_a_save_whose_instance_is_gone_fails_and_says_so(renter, catalog, cluster):
    _user, client = renter
    instance = _installed(cluster, client, catalog)
    body = client.post(
        f"/api/v1/instances/{instance.id}/image", {"name": "gone env"}, format="json"
    ).json()
    Instance.objects.filter(pk=instance.id).update(status="terminated")
    tasks.follow_saving_images()
    image = Image.objects.get(pk=body["id"])
    assert image.status == "failed"
    told = [e.text for e in InstanceEvent.objects.filter(instance=instance)]
    assert told[-1] == (
        "Saving as the image gone env failed: The instance was terminated before its image "
        "was saved: nothing was saved."
    )


def test_an_instance_of_a_brought_image_is_saved_by_the_toolsets_layer_step(
    renter, catalog, cluster
):
    """A brought image has no platform init of its own (the emulated image tree has none at
    /opt/starverse/bin/starverse-save-layer for a reference never seen): the build pod's layer
    step runs from the toolset its first init container copied, so the save succeeds and the
    saved image carries what the tenant installed."""
    _user, client = renter
    brought = client.post(
        "/api/v1/images",
        {"name": "torch", "reference": "docker.io/pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime"},
        format="json",
    )
    assert brought.status_code == 201, brought.content
    instance = _order(client, catalog["h100x1"], brought.json()["id"])
    place = host_path(cluster, instance, PACKAGE)
    place.parent.mkdir(parents=True)
    place.write_text(CONTENT)

    answer = client.post(f"/api/v1/instances/{instance.id}/image", {"name": "mine"}, format="json")
    assert answer.status_code == 202, answer.content
    image = _saved(answer.json()["id"])

    assert (image.status, image.error_message) == ("ready", "")
    assert cluster.images.layers[image.container_image][-1] == len(CONTENT)
    copy = _order(client, catalog["h100x1"], image.id)
    assert host_path(cluster, copy, PACKAGE).read_text() == CONTENT
