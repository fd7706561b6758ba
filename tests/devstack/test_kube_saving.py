"""The kube emulator's build pod of a saved image (devstack/kube/saving.py) through the official
client: the layer program turns what the tenant changed on the system disk into a layer (its
termination message counts it), ``crane append`` pushes it on the base in the time the
registry's bandwidth gives and the pod Succeeds; the registry model then knows the image's
layers and size, and an instance of it on another node pulls that size and is seeded from the
saved files."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from devstack.kube import KubeEmulator
from devstack.kube.saving import push_args
from tests.devstack import wait_for

NS = "saving"
BASE = "nvcr.io/nvidia/pytorch:24.05-py3"
TARGET = "127.0.0.1:5000/t-tenant/my-env:abc123"
DIRS = ["usr", "etc", "root"]


def _claim(api: client.CoreV1Api, name: str) -> str:
    api.create_namespaced_persistent_volume_claim(
        NS,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    return name


def _instance_pod(name: str, image: str, claim: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "initContainers": [
                {
                    "name": "system-disk",
                    "image": image,
                    "command": ["/opt/starverse/bin/starverse-seed-rootfs", "/sys", *DIRS],
                    "volumeMounts": [{"name": "system", "mountPath": "/sys"}],
                }
            ],
            "containers": [{"name": "main", "image": image}],
            "volumes": [{"name": "system", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def _build_pod(name: str, claim: str) -> dict[str, Any]:
    layer = "/work/layer.tar.gz"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": "gpu-h100-0",
            "restartPolicy": "Never",
            "initContainers": [
                {
                    "name": "layer",
                    "image": BASE,
                    "command": ["/opt/starverse/bin/starverse-save-layer", "/system", layer, *DIRS],
                    "volumeMounts": [
                        {"name": "system", "mountPath": "/system", "readOnly": True},
                        {"name": "work", "mountPath": "/work"},
                    ],
                }
            ],
            "containers": [
                {
                    "name": "push",
                    "image": "gcr.io/go-containerregistry/crane:v0.20.2",
                    "command": ["crane", "append", "--base", BASE, "--new_layer", layer],
                    "args": ["--new_tag", TARGET],
                    "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                }
            ],
            "volumes": [
                {
                    "name": "system",
                    "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
                },
                {"name": "work", "emptyDir": {}},
            ],
        },
    }


def _phase(api: client.CoreV1Api, name: str, phase: str) -> client.V1Pod:
    return wait_for(
        lambda: (pod := api.read_namespaced_pod(name, NS)).status.phase == phase and pod,
        f"{name} {phase}",
    )


def _volume(emu: KubeEmulator, api: client.CoreV1Api, claim: str) -> Any:
    name = api.read_namespaced_persistent_volume_claim(claim, NS).spec.volume_name
    return emu.volume_data.volume_dir(name)


def _changed_instance(emu: KubeEmulator, api: client.CoreV1Api) -> None:
    """An instance's system disk, seeded from BASE, then changed by its tenant and stopped."""
    api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    _claim(api, "sys")
    api.create_namespaced_pod(NS, _instance_pod("inst", BASE, "sys", "gpu-h100-0"))
    _phase(api, "inst", "Running")
    root = _volume(emu, api, "sys")
    (root / "usr/lib").mkdir(parents=True, exist_ok=True)
    (root / "usr/lib/big.bin").write_bytes(b"x" * 3_000_000)
    (root / "root/notes.txt").write_text("hello\n")
    (root / "usr/bin/python3").unlink()
    api.delete_namespaced_pod("inst", NS, grace_period_seconds=0)
    wait_for(lambda: not api.list_namespaced_pod(NS).items, "the instance's pod gone")


def test_a_saved_image_is_the_base_plus_the_changes_and_pulls_its_size_elsewhere(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    emu.set_image_size(BASE, 400_000_000)
    _changed_instance(emu, api)

    api.create_namespaced_pod(NS, _build_pod("save", "sys"))
    pod = _phase(api, "save", "Succeeded")

    [layer] = pod.status.init_container_statuses
    assert json.loads(layer.state.terminated.message) == {
        "layer_bytes": 3_000_006,
        "files": 2,
        "deleted": 1,
    }
    [push] = pod.status.container_statuses
    assert push.state.terminated.exit_code == 0
    assert emu.images.layers[TARGET] == [400_000_000, 3_000_006]
    assert emu.images.size(TARGET) == 403_000_006

    _claim(api, "sys-2")
    api.create_namespaced_pod(NS, _instance_pod("second", TARGET, "sys-2", "gpu-h100-1"))
    _phase(api, "second", "Running")
    pulled = [
        e.message
        for e in api.list_namespaced_event(NS).items
        if e.reason == "Pulled" and e.involved_object.name == "second"
    ]
    assert all("Image size: 403000006 bytes" in message for message in pulled), pulled
    root = _volume(emu, api, "sys-2")
    assert (root / "root/notes.txt").read_text() == "hello\n"
    assert (root / "usr/lib/big.bin").stat().st_size == 3_000_000
    assert not (root / "usr/bin/python3").exists()
    assert (root / "usr/bin/tini").read_text() == "emulated tini\n"


def test_the_push_takes_the_layers_bytes_over_the_registrys_bandwidth(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    emu.images.registry_bandwidth_mbps = 0.12  # the 3 MB layer: 25 s
    _changed_instance(emu, api)
    api.create_namespaced_pod(NS, _build_pod("save", "sys"))
    wait_for(
        lambda: (
            (api.read_namespaced_pod("save", NS).status.container_statuses or [None])[0]
            and api.read_namespaced_pod("save", NS).status.container_statuses[0].state.running
        ),
        "the push running",
    )

    with emu.paused():
        emu.step(20)
        assert api.read_namespaced_pod("save", NS).status.phase == "Running"
        emu.step(6)
        emu.step(0)

    assert api.read_namespaced_pod("save", NS).status.phase == "Succeeded"


def test_a_push_without_its_layer_fails_the_pod(emu: KubeEmulator, api: client.CoreV1Api) -> None:
    _changed_instance(emu, api)
    body = _build_pod("save", "sys")
    body["spec"]["initContainers"] = []
    api.create_namespaced_pod(NS, body)

    pod = _phase(api, "save", "Failed")

    assert pod.status.container_statuses[0].state.terminated.exit_code == 1
    assert TARGET not in emu.images.layers


def test_push_args_reads_crane_appends_flags() -> None:
    assert push_args({"command": ["crane", "append", "-b", "a", "-f", "/l", "-t", "b"]}) == (
        push_args(
            {
                "command": ["crane", "append"],
                "args": ["--base", "a", "--new_layer", "/l", "--new_tag", "b"],
            }
        )
    )
    assert push_args({"command": ["crane", "append", "-b", "a"]}) is None
    assert push_args({"command": ["crane", "copy", "a", "b"]}) is None
