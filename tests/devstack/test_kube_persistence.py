"""The emulator's state kept on disk (``--state-dir``, devstack/kube/persistence.py): stopped —
by SIGTERM or SIGKILL — and started again, it serves the objects it had under the same uids
and resourceVersions, its volumes keep their files, and a watch from before is 410 Gone."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from devstack.kube import KubeEmulator
from devstack.kube.persistence import JOURNAL, SNAPSHOT
from devstack.kube.resources import CONFIGMAPS
from tests.devstack import config_map, core_api, listening, start_emulator, wait_for

REPO = Path(__file__).resolve().parents[2]
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def claim_and_pod(api: client.CoreV1Api) -> None:
    api.create_namespaced_persistent_volume_claim(
        "default",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    api.create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "trainer"},
            "spec": {
                "tolerations": [TOLERATION],
                "containers": [
                    {
                        "name": "main",
                        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }
                ],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            },
        },
    )


def running(api: client.CoreV1Api) -> bool:
    pod = api.read_namespaced_pod("trainer", "default")
    return bool(pod.status.phase == "Running" and pod.status.container_statuses[0].ready)


def uids(api: client.CoreV1Api) -> dict[str, str]:
    pod = api.read_namespaced_pod("trainer", "default")
    claim = api.read_namespaced_persistent_volume_claim("data", "default")
    node = api.read_node(pod.spec.node_name)
    return {"pod": pod.metadata.uid, "claim": claim.metadata.uid, "node": node.metadata.uid}


def emulator_process(port: int, state: Path, data: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "devstack.kube", "--port", str(port), "--fleet", "h100=1"]
    argv += ["--pull-delay", "0.05", "--start-delay", "0.05", "--log-level", "WARNING"]
    argv += ["--state-dir", str(state), "--data-dir", str(data)]
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL)
    wait_for(lambda: listening(port), "the emulator listening", timeout=60)
    return process


def api_at(port: int) -> client.CoreV1Api:
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    return client.CoreV1Api(client.ApiClient(cfg))


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("stop_with", [signal.SIGKILL, signal.SIGTERM])
def test_killed_and_started_again_it_keeps_objects_and_volume_files(
    tmp_path: Path, stop_with: signal.Signals
) -> None:
    port, state, data = free_port(), tmp_path / "state", tmp_path / "volumes"
    process = emulator_process(port, state, data)
    try:
        api = api_at(port)
        claim_and_pod(api)
        wait_for(lambda: running(api), "the pod running", timeout=30)
        before = uids(api)
        version = int(api.list_namespaced_pod("default").metadata.resource_version)
        volume = api.read_namespaced_persistent_volume_claim("data", "default").spec.volume_name
        (data / volume / "step").write_text("42")
        process.send_signal(stop_with)
        process.wait(timeout=30)
        assert not listening(port)

        process = emulator_process(port, state, data)
        api = api_at(port)
        assert uids(api) == before  # the same objects, not new ones of the same names
        claim = api.read_namespaced_persistent_volume_claim("data", "default")
        assert (claim.status.phase, claim.spec.volume_name) == ("Bound", volume)
        assert (data / volume / "step").read_text() == "42"
        assert int(api.list_namespaced_pod("default").metadata.resource_version) >= version
        # its kubelet starts the pod's containers again (a node's reboot), on the same node
        wait_for(lambda: running(api), "the pod running again", timeout=30)
        made = api.create_namespaced_config_map("default", config_map("after"))
        assert int(made.metadata.resource_version) > version
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


def test_a_watch_from_before_the_restart_is_410_gone_and_deletions_are_kept(
    tmp_path: Path,
) -> None:
    first = start_emulator(state_dir=tmp_path / "state")
    api = core_api(first)
    api.create_namespaced_config_map("default", config_map("kept"))
    api.create_namespaced_config_map("default", config_map("deleted"))
    old = api.list_namespaced_config_map("default").metadata.resource_version
    api.delete_namespaced_config_map("deleted", "default")
    api.api_client.close()
    first.stop()

    second = start_emulator(state_dir=tmp_path / "state")
    api = core_api(second)
    try:
        names = {m.metadata.name for m in api.list_namespaced_config_map("default").items}
        assert names == {"kept"}
        with pytest.raises(ApiException) as caught:
            list(
                watch.Watch().stream(
                    api.list_namespaced_config_map,
                    "default",
                    resource_version=old,
                    timeout_seconds=1,
                )
            )
        assert caught.value.status == 410
    finally:
        api.api_client.close()
        second.stop()


def test_the_journal_alone_restores_what_a_killed_emulator_committed(tmp_path: Path) -> None:
    """The snapshot is written at start and stop only (and every COMPACT_EVERY changes): what
    came after it is in the journal, read back on top of it."""
    emulator = KubeEmulator(state_dir=tmp_path / "state")  # not started: no stop, no snapshot
    with emulator.store.lock:
        for name in ("a", "b"):
            emulator.api.create_internal(CONFIGMAPS, config_map(name))
    assert (tmp_path / "state" / SNAPSHOT).exists()
    assert len((tmp_path / "state" / JOURNAL).read_text().splitlines()) == 2

    again = KubeEmulator(state_dir=tmp_path / "state")
    kept = {m["metadata"]["name"] for m in again.store.items(CONFIGMAPS)}
    assert kept == {"a", "b"}
    assert again.store.resource_version == emulator.store.resource_version


def test_without_a_state_dir_nothing_is_kept(tmp_path: Path) -> None:
    first = start_emulator(data_dir=tmp_path / "volumes")
    core_api(first).create_namespaced_config_map("default", config_map("gone"))
    first.stop()
    second = start_emulator(data_dir=tmp_path / "volumes")
    try:
        names = {
            m.metadata.name for m in core_api(second).list_namespaced_config_map("default").items
        }
        assert "gone" not in names
    finally:
        second.stop()
