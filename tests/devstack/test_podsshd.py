"""make run's SSH into emulated instances (devstack/podsshd.py, MAKE_RUN_SSHD=1): for a running
instance pod on the emulator, the images' real init with Debian's sshd serves the pod's access
Secret on 127.0.0.1 at its Service's node port; a key taken out of the Secret stops working, a
key put in starts to; the pod's deletion stops the sshd and removes its scratch root. A pod
that is not an instance's gets nothing, nor does one whose container does not run the platform's
entrypoint from the toolset its init container copied (the real entrypoint runs the init)."""

import subprocess
from pathlib import Path

from devstack.podsshd import ENTRYPOINT, PodSshd, unsafe_parent
from instances.provisioning import manifests
from starverse.core.hostkeys import host_key_generate
from tests.devstack import listening, pod_body, wait_for
from tests.sshd import access_data, ssh, user_key

NAME = "inst-ssh1"
LABELS = {"starverse.io/instance": "ins-ssh1"}


def _secret(keys: str, host_key) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{NAME}-access", "labels": LABELS},
        "stringData": access_data(keys, host_key),
    }


def _platform_pod(
    name: str, image: str = "docker.io/pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime"
):
    """A pod of the platform's shape for any image: the toolset's init container fills the
    emptyDir the main container runs the entrypoint from."""
    pod = pod_body(name, image=image)
    pod["metadata"]["labels"] = LABELS | {"app": name}
    tools = manifests.tools_container()
    tools["image"] = "starverse/init:test"
    pod["spec"]["initContainers"] = [tools]
    pod["spec"]["volumes"] = [manifests.tools_volume()]
    main = pod["spec"]["containers"][0]
    main["command"] = list(manifests.ENTRYPOINT_COMMAND)
    main["volumeMounts"] = [manifests.tools_mount()]
    return pod


def test_podsshd_knows_the_platforms_entrypoint():
    assert manifests.ENTRYPOINT_COMMAND == [ENTRYPOINT]


def _ssh(key: Path, port: int, known_hosts: Path) -> subprocess.CompletedProcess[str]:
    return ssh(key, port, known_hosts, "echo $STARVERSE_INSTANCE_ID")


def test_an_instance_pod_gets_the_images_sshd_until_it_goes(api, sshd_root, tmp_path):
    host_key = host_key_generate()
    first, first_public = user_key(tmp_path, "first")
    second, second_public = user_key(tmp_path, "second")
    api.create_namespaced_secret("default", _secret(first_public + "\n", host_key))
    service = api.create_namespaced_service(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "labels": LABELS},
            "spec": {
                "type": "NodePort",
                "selector": LABELS,
                "ports": [{"name": "ssh", "port": 22, "targetPort": 22}],
            },
        },
    )
    port = service.spec.ports[0].node_port
    pod = _platform_pod(NAME)
    pod["spec"]["containers"][0]["env"] = [{"name": "STARVERSE_INSTANCE_ID", "value": "ins_ssh1"}]
    api.create_namespaced_pod("default", pod)
    api.create_namespaced_pod("default", pod_body("not-an-instance"))
    # an instance-labelled pod that runs its image's own command has no init to play
    own = pod_body("own-command")
    own["metadata"]["labels"] = {"starverse.io/instance": "ins-own"}
    own["spec"]["containers"][0]["command"] = ["/usr/bin/tini", "--", "sleep", "infinity"]
    api.create_namespaced_pod("default", own)
    wait_for(lambda: api.read_namespaced_pod(NAME, "default").status.phase == "Running")
    wait_for(lambda: api.read_namespaced_pod("own-command", "default").status.phase == "Running")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_key.public_openssh}\n")

    pods = PodSshd(api, sshd_root / "pods", keys_poll_s=0.2)
    try:
        pods.sync()
        assert list(pods.served) == [f"default/{NAME}"]  # the other pod is no instance's
        wait_for(lambda: listening(port), "sshd listening", timeout=15)
        session = _ssh(first, port, known_hosts)
        assert session.returncode == 0, session.stderr
        assert session.stdout == "ins_ssh1\n"  # the pod's environment reaches the session
        assert _ssh(second, port, known_hosts).returncode == 255

        # the keys change in the Secret (a key added, one deleted): the sshd follows
        api.replace_namespaced_secret(
            f"{NAME}-access", "default", _secret(second_public + "\n", host_key)
        )
        pods.sync()
        wait_for(lambda: _ssh(second, port, known_hosts).returncode == 0, "new key", timeout=15)
        assert _ssh(first, port, known_hosts).returncode == 255

        # the pod goes: so do its sshd and its scratch root
        root = pods.served[f"default/{NAME}"].root
        api.delete_namespaced_pod(NAME, "default", grace_period_seconds=0)
        wait_for(
            lambda: NAME not in {p.metadata.name for p in api.list_namespaced_pod("default").items},
            "pod gone",
            timeout=15,
        )
        pods.sync()
        assert pods.served == {}
        assert not listening(port)
        assert not root.exists()
    finally:
        pods.close()


def test_a_scratch_root_below_a_writable_directory_is_refused(tmp_path):
    """sshd's StrictModes would refuse every key there: podsshd says so at its start."""
    writable = tmp_path / "shared"
    writable.mkdir()
    writable.chmod(0o777)
    assert unsafe_parent(writable / "pods") == writable
    assert unsafe_parent(Path("/root")) is None
