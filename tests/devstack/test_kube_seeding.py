"""The kube emulator's init containers running the system-disk seeding program
(``starverse-seed-rootfs TARGET DIR...``, devstack/kube/seeding.py) through the official
client: the image's directories copied into the claim once, then kept; a target that is no
writable volume leaves the pod Pending with the init container's error."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from devstack.kube import KubeEmulator
from devstack.kube.seeding import seed_args
from tests.devstack import wait_for

NS = "seeding"
IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


def _pod(name: str, target: str = "/sys", read_only: bool = False) -> dict[str, Any]:
    mount = {"name": "system", "mountPath": "/sys", "readOnly": read_only}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": "gpu-h100-0",
            "initContainers": [
                {
                    "name": "system-disk",
                    "image": IMAGE,
                    "command": ["/opt/starverse/bin/starverse-seed-rootfs", target, "usr", "etc"],
                    "volumeMounts": [mount],
                }
            ],
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "volumeMounts": [
                        {"name": "system", "mountPath": f"/{d}", "subPath": d}
                        for d in ("usr", "etc")
                    ],
                }
            ],
            "volumes": [{"name": "system", "persistentVolumeClaim": {"claimName": "sys"}}],
        },
    }


def _setup(api: client.CoreV1Api) -> None:
    api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    api.create_namespaced_persistent_volume_claim(
        NS,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "sys"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )


def _phase(api: client.CoreV1Api, name: str, phase: str) -> client.V1Pod:
    return wait_for(
        lambda: (pod := api.read_namespaced_pod(name, NS)).status.phase == phase and pod,
        f"{name} {phase}",
    )


def test_the_image_is_copied_once_and_the_tenants_changes_kept(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    _setup(api)
    api.create_namespaced_pod(NS, _pod("first"))
    pod = _phase(api, "first", "Running")
    [status] = pod.status.init_container_statuses
    assert status.state.terminated.exit_code == 0
    assert status.state.terminated.message == "starverse-seed-rootfs: seeded usr etc"
    volume = api.read_namespaced_persistent_volume_claim("sys", NS).spec.volume_name
    root = emu.volume_data.volume_dir(volume)
    assert (root / "usr/bin/tini").read_text() == "emulated tini\n"
    assert "nvcr.io/nvidia/pytorch:24.05-py3" in (root / "etc/os-release").read_text()
    (root / "usr/bin/tini").write_text("the tenant's own\n")

    api.delete_namespaced_pod("first", NS, grace_period_seconds=0)
    wait_for(lambda: not api.list_namespaced_pod(NS).items, "the first pod gone")
    api.create_namespaced_pod(NS, _pod("second"))
    pod = _phase(api, "second", "Running")

    assert pod.status.init_container_statuses[0].state.terminated.message == (
        "starverse-seed-rootfs: seeded nothing (all kept)"
    )
    assert (root / "usr/bin/tini").read_text() == "the tenant's own\n"


def test_a_target_that_is_no_writable_volume_keeps_the_pod_pending(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    _setup(api)
    api.create_namespaced_pod(NS, _pod("stuck", read_only=True))

    status = wait_for(
        lambda: (api.read_namespaced_pod("stuck", NS).status.init_container_statuses or [None])[0],
        "the init container's status",
    )

    assert status.state.terminated.exit_code == 1
    assert status.state.terminated.message == "starverse-seed-rootfs: /sys is not a writable volume"
    assert api.read_namespaced_pod("stuck", NS).status.phase == "Pending"


def test_only_the_seeding_program_is_recognised() -> None:
    assert seed_args({"command": ["/bin/sh", "-c", "true"]}) is None
    assert seed_args({"command": ["starverse-seed-rootfs"]}) is None
    assert seed_args({"command": ["starverse-seed-rootfs", "/t"], "args": ["usr"]}) == (
        "/t",
        ["usr"],
    )
