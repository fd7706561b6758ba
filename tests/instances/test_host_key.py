"""Each instance has an SSH host key the platform made once: its private half reaches the pod
only through the access Secret, its fingerprint is in the API and next to the SSH command in
the console (so a user can check the first connection), and it stays the same across
stop/start. The pod runs the image's init under tini with the environment it reads."""

import base64
import subprocess

from django.test import Client

from instances.lifecycle import instance_start, instance_stop
from instances.models import Instance
from instances.provisioning import converge, manifests
from starverse.core import kube
from starverse.core.adminurls import admin_change_url
from tests.factories import (
    converge_until,
    fund,
    make_instance,
    make_operator,
    make_ssh_key,
    make_user,
    read_existing,
    staff_login,
)


def _secret(instance: Instance) -> dict[str, str]:
    secret = read_existing("Secret", instance.k8s_namespace, f"{instance.k8s_name}-access")
    if "stringData" in secret:
        return dict(secret["stringData"])
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


def _keygen_fingerprint(public_key: str, tmp_path) -> str:
    path = tmp_path / "host.pub"
    path.write_text(public_key)
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()[1]


def _keygen_public(private_key: str, tmp_path) -> str:
    path = tmp_path / "host"
    path.write_text(private_key)
    path.chmod(0o600)
    out = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return out.strip()


def test_the_api_shows_the_host_key_fingerprint_ssh_keygen_reads(catalog, tmp_path):
    user = make_user()
    make_ssh_key(user)
    instance = make_instance(user, status="running")
    client = Client()
    client.force_login(user)

    detail = client.get(f"/api/v1/instances/{instance.id}").json()
    listed = client.get("/api/v1/instances").json()["results"][0]

    secret = _secret(instance)
    public = secret["ssh_host_ed25519_key.pub"].strip()
    assert public.startswith("ssh-ed25519 ")
    expected = _keygen_fingerprint(public, tmp_path)
    assert expected.startswith("SHA256:")
    assert detail["ssh"]["host_key_fingerprint"] == expected
    assert listed["ssh"]["host_key_fingerprint"] == expected
    # the Secret's private key is the pair of that public key, in the form sshd reads
    assert _keygen_public(secret["ssh_host_ed25519_key"], tmp_path) == public
    assert instance.ssh_host_key_fingerprint == expected


def test_the_host_key_stays_the_same_across_stop_and_start(catalog):
    user = make_user()
    instance = make_instance(user, status="running")
    first = _secret(instance)["ssh_host_ed25519_key"]

    instance_stop(instance_id=instance.id)
    assert converge_until(converge.stop, instance.id) == "stopped"
    fund(user, 100_000)
    instance_start(instance_id=instance.id)
    assert converge_until(converge.provision, instance.id) == "running"

    again = Instance.objects.get(pk=instance.id)
    assert again.ssh_host_key_fingerprint == instance.ssh_host_key_fingerprint
    assert _secret(again)["ssh_host_ed25519_key"] == first


def test_every_instance_has_its_own_host_key(catalog):
    user = make_user()
    one = make_instance(user, status="running")
    two = make_instance(user, status="running")

    assert one.ssh_host_key_fingerprint != two.ssh_host_key_fingerprint
    assert one.ssh_host_key != two.ssh_host_key


def test_no_fingerprint_while_not_running(catalog):
    user = make_user()
    instance = make_instance(user, status="stopped")
    client = Client()
    client.force_login(user)

    assert client.get(f"/api/v1/instances/{instance.id}").json()["ssh"] is None


def test_the_console_shows_the_fingerprint_next_to_the_ssh_command(catalog):
    user = make_user()
    make_ssh_key(user)
    instance = make_instance(user, status="running")
    client = Client()
    client.force_login(user)

    page = client.get(f"/console/instances/{instance.id}/").content.decode()

    command = page.index(f"ssh -p {instance.ssh_port} root@")
    fingerprint = page.index(
        f'<code class="mono" id="host-key-fingerprint">{instance.ssh_host_key_fingerprint}</code>'
    )
    assert command < fingerprint < page.index("connect-jupyter")
    assert "answer yes only if it is this one" in page
    assert "PRIVATE KEY" not in page


def test_operators_never_see_the_private_host_key(catalog):
    instance = make_instance(make_user(), status="running")
    client = Client()
    staff_login(client, make_operator())

    page = client.get(admin_change_url("instances_instance", instance.id))

    assert page.status_code == 200
    assert instance.ssh_host_key_fingerprint in page.content.decode()
    assert "PRIVATE KEY" not in page.content.decode()
    assert instance.jupyter_token not in page.content.decode()


def test_the_pod_runs_the_toolsets_entrypoint_with_what_it_reads(catalog):
    instance = make_instance(make_user(), status="running")

    pod = read_existing("Pod", instance.k8s_namespace, instance.k8s_name)
    spec = pod["spec"]
    container = spec["containers"][0]
    env = {item["name"]: item for item in container["env"]}

    # the entrypoint of the toolset the first init container copied (it puts tini in)
    assert container["command"] == ["/opt/starverse/bin/entrypoint"]
    assert spec["terminationGracePeriodSeconds"] == 90
    assert spec["terminationGracePeriodSeconds"] > manifests.STOP_HOOKS_DEADLINE_S
    assert env["STARVERSE_STOP_DEADLINE_S"]["value"] == "60"
    assert env["STARVERSE_INSTANCE_ID"]["value"] == instance.id
    assert env["STARVERSE_BALANCE_URL"]["value"] == "http://127.0.0.1:8000/billing/"
    assert env["STARVERSE_ACCESS_DIR"]["value"] == "/etc/starverse/access"
    # the token is read from the mounted Secret, never put in the environment
    assert all("TOKEN" not in name for name in env)
    assert all("valueFrom" not in item for item in env.values())
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["access"] == {
        "name": "access",
        "mountPath": "/etc/starverse/access",
        "readOnly": True,
    }
    access = next(v for v in spec["volumes"] if v["name"] == "access")
    assert access["secret"]["secretName"] == f"{instance.k8s_name}-access"
    assert kube.read("Secret", instance.k8s_namespace, f"{instance.k8s_name}-access") is not None
