"""Any image runs as an instance: a brought image (`POST /images` with a plain reference) is
ordered like a catalogue one, and its pod gets the platform's init toolset from INIT_IMAGE,
copied by the first init container into an emptyDir that the image's containers run from (the
system disk's seeding, then the entrypoint), and SSH into it works (devstack.podsshd plays the
container, running the real entrypoint). An image that cannot run the init says why on the
timeline. Played on the kube emulator, whose kubelet runs init containers in order over the
pod's shared volumes and cannot exec a command a volume does not hold."""

import base64

from kubernetes import client as kube_client
from kubernetes import config as kube_config

from devstack.podsshd import PodSshd
from instances.models import Instance, InstanceEvent
from instances.provisioning import converge, manifests
from starverse.core import kube
from tests.devstack import listening, wait_for
from tests.factories import converge_until, host_path
from tests.sshd import ssh, user_key

REFERENCE = "docker.io/pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime"


def _order_brought(client, catalog) -> str:
    brought = client.post(
        "/api/v1/images", {"name": "torch", "reference": REFERENCE}, format="json"
    )
    assert brought.status_code == 201, brought.content
    ordered = client.post(
        "/api/v1/instances",
        {"offering": catalog["h100x1"].id, "image": brought.json()["id"]},
        format="json",
    )
    assert ordered.status_code == 202, ordered.content
    return ordered.json()["id"]


def test_a_brought_image_runs_the_platforms_init_from_the_toolset(
    renter, catalog, cluster, settings
):
    settings.INIT_IMAGE = "registry.example/starverse/init:9.9.9"
    _user, client = renter
    instance_id = _order_brought(client, catalog)
    assert converge_until(converge.provision, instance_id) == "running"

    instance = Instance.objects.get(pk=instance_id)
    pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    assert pod is not None
    spec = pod["spec"]
    tools, seed = spec["initContainers"]
    main = spec["containers"][0]
    assert (tools["name"], tools["image"]) == ("starverse-init", settings.INIT_IMAGE)
    assert tools["command"] == ["/opt/starverse/bin/starverse-tools-install", "/starverse-tools"]
    assert tools["volumeMounts"] == [{"name": "starverse-tools", "mountPath": "/starverse-tools"}]
    assert seed["image"] == main["image"] == REFERENCE
    assert seed["command"][0] == "/starverse-tools/bin/starverse-seed-rootfs"
    assert main["command"] == ["/opt/starverse/bin/entrypoint"]
    assert {"name": "starverse-tools", "mountPath": "/opt/starverse", "readOnly": True} in main[
        "volumeMounts"
    ]
    assert {"name": "starverse-tools", "emptyDir": {"sizeLimit": "512Mi"}} in spec["volumes"]
    # no privilege anywhere: the toolset's copy is hardened as the instance's container
    for container in (tools, seed, main):
        assert container["securityContext"]["privileged"] is False
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]

    # in order over the shared emptyDir: the toolset was copied, then the seeding ran from it
    copied, seeded = pod["status"]["initContainerStatuses"]
    assert copied["state"]["terminated"]["exitCode"] == 0
    assert copied["state"]["terminated"]["message"] == (
        "starverse-tools-install: starverse/init emulated into /starverse-tools"
    )
    assert seeded["state"]["terminated"]["message"].startswith("starverse-seed-rootfs: seeded usr")
    entrypoint = host_path(cluster, instance, "/opt/starverse/bin/entrypoint")
    assert entrypoint.read_text() == "emulated entrypoint\n"
    # the toolset is the pod's own (an emptyDir), never on the tenant's system disk
    system_opt = host_path(cluster, instance, "/opt")
    assert not (system_opt / "starverse" / "bin" / "entrypoint").exists()


def test_without_the_toolset_the_entrypoint_cannot_start_and_says_why(
    renter, catalog, cluster, settings
):
    """The emulator refuses to exec a command its volume does not hold: had the toolset not
    been copied (the copy's image failing to start), the seeding could not run either."""
    settings.INIT_IMAGE = "registry.example/starverse/init:broken"
    cluster.fail_container_start("starverse/init:broken", "exec format error")
    _user, client = renter
    instance_id = _order_brought(client, catalog)
    assert converge_until(converge.provision, instance_id) == "failed"
    instance = Instance.objects.get(pk=instance_id)
    assert instance.error_message.startswith(
        "The image registry.example/starverse/init:broken cannot run here (StartError: exec "
        "format error)."
    )
    pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    assert pod is not None
    # the seeding after it never ran
    assert [s["name"] for s in pod["status"]["initContainerStatuses"]] == ["starverse-init"]
    assert instance.cost_fen == 0


def test_an_image_the_init_cannot_run_says_why_on_the_timeline(renter, catalog, cluster):
    reason = "the image has no python3 3.8 or later and the init toolset has no shell init"
    cluster.fail_container_exit(REFERENCE, manifests.ENTRYPOINT_REFUSED_EXIT, reason)
    _user, client = renter
    instance_id = _order_brought(client, catalog)
    assert converge_until(converge.provision, instance_id) == "failed"
    instance = Instance.objects.get(pk=instance_id)
    assert instance.error_message == (
        f"The image {REFERENCE} cannot run the platform's init: {reason}. It was not billed; "
        "choose another image, or add what is missing to it."
    )
    failed = InstanceEvent.objects.filter(instance=instance, status="failed").get()
    assert failed.text == instance.error_message
    assert instance.cost_fen == 0


def test_ssh_into_a_brought_image_works(renter, catalog, cluster, kubeconfig, sshd_root, tmp_path):
    _user, client = renter
    key, public = user_key(tmp_path, "mine")
    added = client.post("/api/v1/ssh-keys", {"name": "laptop", "public_key": public}, format="json")
    assert added.status_code == 201, added.content
    instance_id = _order_brought(client, catalog)
    assert converge_until(converge.provision, instance_id) == "running"
    instance = Instance.objects.get(pk=instance_id)
    detail = client.get(f"/api/v1/instances/{instance_id}").json()
    port = detail["ssh"]["port"]
    known_hosts = tmp_path / "known_hosts"
    secret = kube.read("Secret", instance.k8s_namespace, f"{instance.k8s_name}-access")
    assert secret is not None
    known_hosts.write_text(f"[127.0.0.1]:{port} {_host_public(secret)}")

    api = kube_client.CoreV1Api(kube_config.new_client_from_config(kubeconfig))
    pods = PodSshd(api, sshd_root / "pods", keys_poll_s=0.2)
    try:
        pods.sync()
        assert list(pods.served) == [f"{instance.k8s_namespace}/{instance.k8s_name}"]
        wait_for(lambda: listening(port), "sshd listening", timeout=15)
        session = ssh(key, port, known_hosts, "echo $STARVERSE_INSTANCE_ID")
        assert session.returncode == 0, session.stderr
        assert session.stdout == f"{instance_id}\n"
    finally:
        pods.close()


def _host_public(secret: dict) -> str:
    return base64.b64decode(secret["data"]["ssh_host_ed25519_key.pub"]).decode()
