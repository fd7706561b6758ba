"""An image that cannot start says why: the runtime's reason and message (an image without
/bin/sh, or built for another CPU) end the provisioning at once, unbilled, in the instance's
error and timeline, instead of a timeout. Played on the kube emulator, whose runtime can be
told it cannot run an image's containers (fail_container_start)."""

import pytest

from instances.models import Instance, InstanceEvent
from instances.provisioning import converge
from tests.factories import converge_until, fund, make_user

NO_SHELL = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    'runc create failed: unable to start container process: exec: "/bin/sh": stat /bin/sh: '
    "no such file or directory: unknown"
)


@pytest.fixture
def renter(catalog, client_for, settings):
    settings.MAX_RUNNING_GPUS = 32
    user = make_user()
    fund(user, 100_000)
    return user, client_for(user)


def test_an_image_without_a_shell_fails_at_once_saying_why(renter, catalog, cluster):
    _user, client = renter
    image = catalog["image"].container_image
    cluster.fail_container_start(image, NO_SHELL)
    body = client.post(
        "/api/v1/instances",
        {"offering": catalog["h100x1"].id, "image": catalog["image"].id},
        format="json",
    ).json()
    assert converge_until(converge.provision, body["id"]) == "failed"
    instance = Instance.objects.get(pk=body["id"])
    assert instance.error_message == (
        f"The image {image} cannot run here (StartError: {NO_SHELL}). An image needs a POSIX "
        "shell at /bin/sh and to be built for the node's CPU architecture. It was not billed; "
        "choose another image."
    )
    assert instance.cost_fen == 0
    failed = InstanceEvent.objects.filter(instance=instance, status="failed").get()
    assert failed.text == instance.error_message
    # the cluster's own event (the runtime's error) is in the timeline before it
    told = [event.text for event in InstanceEvent.objects.filter(instance=instance)]
    assert any(text.startswith("Kubernetes: Failed: Error: failed to create") for text in told), (
        told
    )
