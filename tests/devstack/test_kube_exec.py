"""The kube emulator's pods/exec: the official client's WebSocket exec (v4 channels, binary and
base64) reaches a simulated shell that answers echo, ls of the public pool, nvidia-smi from the
pod's emulated GPUs, stty size after resizes, and exit with its status; a client that goes away
ends the session; a missing pod, a container not running and a request without the upgrade are
refused like the apiserver refuses them; and RBAC asks `create` on pods/exec."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import websocket
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from devstack.kube import KubeEmulator
from devstack.kube.rbac import User
from devstack.kube.resources import PODS
from tests.conftest import KUBE_TIMINGS
from tests.devstack import pod_body, wait_for

SHELL = ["/bin/sh", "-c", "exec bash -l"]
H100 = "gpu-h100-0"


def _running(api: client.CoreV1Api, name: str, gpus: int = 1) -> client.V1Pod:
    api.create_namespaced_pod("default", pod_body(name, gpus=gpus, nodeName=H100))
    return wait_for(
        lambda: (pod := api.read_namespaced_pod(name, "default")).status.phase == "Running" and pod,
        what=f"pod {name} to run",
    )


def _shell(api: client.CoreV1Api, name: str, command: list[str] = SHELL) -> Any:
    return stream(
        api.connect_get_namespaced_pod_exec,
        name,
        "default",
        command=command,
        stdin=True,
        stdout=True,
        stderr=True,
        tty=True,
        binary=True,
        _preload_content=False,
    )


def _until(ws: Any, text: str) -> str:
    """Stdout until `text` has been printed."""
    seen = b""

    def arrived() -> bool:
        nonlocal seen
        seen += ws.read_stdout(timeout=0.05) or b""
        return text.encode() in seen

    wait_for(arrived, what=f"{text!r} on the terminal")
    return seen.decode()


def _uuid(node: str, index: int) -> str:
    """The GPU UUID the simulated node agent reports for GPU `index` of `node`."""
    d = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return f"GPU-{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"


def test_a_command_runs_once_and_reports_its_exit_status(api: client.CoreV1Api) -> None:
    first = _running(api, "first", gpus=2)
    _running(api, "second", gpus=1)
    node = first.spec.node_name

    listed = stream(
        api.connect_get_namespaced_pod_exec,
        "second",
        "default",
        command=["nvidia-smi", "-L"],
        stdin=False,
        stdout=True,
        stderr=True,
        tty=False,
    )
    missing = _shell(api, "second", command=["ls", "/nope"])
    missing.run_forever(timeout=5)

    # the node's GPUs go to its pods oldest first, as the node agent sees them busy
    assert listed == f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {_uuid(node, 2)})\n"
    status = json.loads(missing.read_channel(3))
    assert status["status"] == "Failure"
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "2"}]


def test_the_interactive_shell_answers_like_a_terminal(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    pod = _running(api, "shell", gpus=2)
    ws = _shell(api, "shell")
    assert _until(ws, "# ") == "root@shell:~# "
    assert [(s.pod, s.command, s.protocol) for s in emu.exec_sessions] == [
        ("shell", tuple(SHELL), "v4.channel.k8s.io")
    ]

    ws.write_channel(4, json.dumps({"Width": 132, "Height": 40}).encode())
    greeting = "echo 你好\r".encode()
    ws.write_stdin(greeting[:7])  # 你 split across two frames arrives whole
    ws.write_stdin(greeting[7:])
    assert _until(ws, "你好\r\nroot@") == "echo 你好\r\n你好\r\nroot@shell:~# "
    ws.write_stdin(b"stty size\r")
    assert _until(ws, "132\r\n") == "stty size\r\n40 132\r\n"
    ws.write_stdin(b"ls /public\r")
    assert "ls /public\r\ndata  models\r\n" in _until(ws, "models\r\n")
    ws.write_stdin(b"ls /public/models\r")
    assert _until(ws, "Instruct\r\n").endswith(
        "\r\nBaichuan2-7B-Chat  bge-large-zh-v1.5  chatglm3-6b  Meta-Llama-3-8B-Instruct  "
        "Qwen2-7B-Instruct\r\n"
    )
    ws.write_stdin(b"nvidia-smi\r")
    table = _until(ws, "No running processes found")
    assert table.count("NVIDIA H100 80GB HBM3") == 2
    assert "|   1  NVIDIA H100 80GB HBM3          On  |   00000000:2A:00.0 Off |" in table
    assert "|       0MiB /  81559MiB |" in table and "CUDA Version: 12.4" in table
    ws.write_stdin(b"nvidia-smi -L\r")
    assert f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {_uuid(pod.spec.node_name, 1)})" in _until(
        ws, "GPU 1"
    )
    ws.write_stdin(("rm -rf 你" + "\x7f" * 8 + "\x03").encode())
    # a wide character takes two columns to erase, the others one
    erased = "\b\b  \b\b" + "\b \b" * 7
    assert _until(ws, "^C\r\n").endswith(f"# rm -rf 你{erased}^C\r\n")
    ws.write_stdin(b"make\r")
    assert "bash: make: command not found\r\n" in _until(ws, "not found")
    ws.write_stdin(b"exit 3\r")
    ws.run_forever(timeout=5)

    assert json.loads(ws.read_channel(3))["details"]["causes"][0]["message"] == "3"
    assert not ws.is_open()
    wait_for(lambda: emu.exec_sessions == [], what="the session to end")


def test_a_client_that_goes_away_ends_the_session(emu: KubeEmulator, api: client.CoreV1Api) -> None:
    _running(api, "gone")
    ws = _shell(api, "gone")
    _until(ws, "# ")
    assert len(emu.exec_sessions) == 1

    ws.sock.abort()  # no closing handshake: the connection just breaks

    wait_for(lambda: emu.exec_sessions == [], what="the emulator to end the session")


def test_the_base64_channel_protocol(emu: KubeEmulator, api: client.CoreV1Api) -> None:
    _running(api, "b64")
    ws = websocket.create_connection(
        f"{emu.url.replace('http', 'ws')}/api/v1/namespaces/default/pods/b64/exec"
        "?command=nvidia-smi&command=-L&stdout=true&stderr=true",
        subprotocols=["v4.base64.channel.k8s.io"],
        timeout=5,
    )
    frames = []
    while True:
        opcode, data = ws.recv_data()
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            break
        frames.append((data[:1], base64.b64decode(data[1:])))
    ws.close()

    assert ws.subprotocol == "v4.base64.channel.k8s.io"
    assert frames[0][0] == b"1" and frames[0][1].startswith(b"GPU 0: NVIDIA H100 80GB HBM3")
    assert frames[-1] == (b"3", b'{"metadata": {}, "status": "Success"}')


def test_exec_is_refused_like_the_apiserver_refuses_it(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    base = f"{emu.url}/api/v1/namespaces/default/pods"
    with pytest.raises(ApiException, match="Handshake status 404"):
        _shell(api, "nobody")
    emu.set_pull_delay(60)
    api.create_namespaced_pod("default", pod_body("pulling", gpus=1))
    not_running = requests.get(
        f"{base}/pulling/exec?command=sh",
        headers={
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Key": base64.b64encode(b"0123456789abcdef").decode(),
            "Sec-WebSocket-Version": "13",
        },
        timeout=5,
    )
    emu.set_pull_delay(KUBE_TIMINGS["pull_delay_s"])
    _running(api, "plain")
    no_upgrade = requests.get(f"{base}/plain/exec?command=sh", timeout=5)

    assert not_running.status_code == 400
    assert not_running.json()["message"] == (
        'unable to upgrade connection: container not found ("main")'
    )
    assert (no_upgrade.status_code, no_upgrade.json()["message"]) == (
        400,
        "Upgrade request required",
    )
    assert emu.exec_sessions == []


@pytest.fixture(scope="module")
def rbac_emu() -> Iterator[KubeEmulator]:
    users = {"shell-token": User("system:serviceaccount:ops:shell")}
    emulator = KubeEmulator(fleet={"h100": 1}, users=users, **KUBE_TIMINGS).start()
    yield emulator
    emulator.stop()


def test_exec_needs_create_on_pods_exec(rbac_emu: KubeEmulator, tmp_path: Path) -> None:
    rbac_emu.reset()
    rbac = "rbac.authorization.k8s.io"
    rbac_emu.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            for ns in ("team-a", "team-b")
        ]
        + [
            {
                "apiVersion": f"{rbac}/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": [verb]}],
            }
            for name, verb in (("exec", "create"), ("exec-get", "get"))
        ]
        + [
            {
                "apiVersion": f"{rbac}/v1",
                "kind": "RoleBinding",
                "metadata": {"name": role, "namespace": ns},
                "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": "shell", "namespace": "ops"}],
            }
            for role, ns in (("exec", "team-a"), ("exec-get", "team-b"))
        ]
    )
    for ns in ("team-a", "team-b"):
        rbac_emu.apply([{**pod_body("job", gpus=1), "metadata": {"name": "job", "namespace": ns}}])
    kubeconfig = rbac_emu.write_kubeconfig(tmp_path / "shell", token="shell-token")
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))

    def run(ns: str) -> str:
        return stream(
            api.connect_get_namespaced_pod_exec, "job", ns, command=["echo", "hi"], stdout=True
        )

    wait_for(
        lambda: all(
            (rbac_emu.store.get(PODS, ns, "job") or {}).get("status", {}).get("phase") == "Running"
            for ns in ("team-a", "team-b")
        ),
        what="the pods to run",
    )
    assert run("team-a") == "hi\n"
    with pytest.raises(ApiException, match="Handshake status 403"):
        run("team-b")  # get on pods/exec is not enough
