"""The kube emulator's ``crane append`` against a real registry (devstack/kube/oci.py): told of
one (``--registry``, ``set_registry``), the build pod's push puts the saved image in Debian's
docker-registry over the OCI distribution API, a gzip'd tar layer of what the tenant changed
(whiteouts included), a config whose diff_ids are the layers' and an OCI manifest; a base in
the same registry has its layers mounted and kept, one elsewhere is named by annotation. The
model's sizes stay as they were."""

from __future__ import annotations

import gzip
import hashlib
from typing import Any

from kubernetes import client

from devstack.kube import KubeEmulator
from tests.devstack.test_kube_saving import BASE, NS, _build_pod, _changed_instance, _phase
from tests.registry import DockerRegistry


def _save(api: client.CoreV1Api, name: str, base: str, target: str) -> client.V1Pod:
    body = _build_pod(name, "sys")
    push = body["spec"]["containers"][0]
    push["command"][push["command"].index("--base") + 1] = base
    body["spec"]["initContainers"][0]["image"] = base
    push["args"] = ["--new_tag", target]
    api.create_namespaced_pod(NS, body)
    return _phase(api, name, "Succeeded")


def _manifest(registry: DockerRegistry, repository: str, tag: str) -> dict[str, Any]:
    answer = registry.manifest(repository, tag)
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"] == "application/vnd.oci.image.manifest.v1+json"
    manifest: dict[str, Any] = answer.json()
    return manifest


def test_a_saved_image_is_pushed_to_the_real_registry_as_a_layer_of_the_changes(
    emu: KubeEmulator, api: client.CoreV1Api, docker_registry: DockerRegistry
) -> None:
    emu.set_registry(docker_registry.url)
    emu.set_image_size(BASE, 400_000_000)
    _changed_instance(emu, api)
    target = f"{docker_registry.host}/t-emu/my-env:one"

    pod = _save(api, "save", BASE, target)

    assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    assert "t-emu/my-env" in docker_registry.catalog()
    assert docker_registry.tags("t-emu/my-env") == ["one"]
    manifest = _manifest(docker_registry, "t-emu/my-env", "one")
    assert manifest["annotations"] == {"org.opencontainers.image.base.name": BASE}
    [layer] = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    blob = docker_registry.blob("t-emu/my-env", layer["digest"])
    assert layer["digest"] == f"sha256:{hashlib.sha256(blob).hexdigest()}"
    assert docker_registry.layer_files("t-emu/my-env", layer["digest"]) == {
        "root/notes.txt": b"hello\n",
        "usr/lib/big.bin": b"x" * 3_000_000,
        "usr/bin/.wh.python3": b"",  # what the tenant deleted: an OCI whiteout
    }
    config = docker_registry.config("t-emu/my-env", manifest)
    assert config["rootfs"] == {
        "type": "layers",
        "diff_ids": [f"sha256:{hashlib.sha256(gzip.decompress(blob)).hexdigest()}"],
    }
    assert "not copied" in config["history"][0]["created_by"]
    # the model is unchanged: pulls take the base's bytes plus the layer's
    assert emu.images.layers[target] == [400_000_000, 3_000_006]


def test_saved_again_its_base_layers_are_mounted_from_the_same_registry(
    emu: KubeEmulator, api: client.CoreV1Api, docker_registry: DockerRegistry
) -> None:
    emu.set_registry(docker_registry.url)
    _changed_instance(emu, api)
    first = f"{docker_registry.host}/t-emu/first:one"
    _save(api, "save", BASE, first)
    base = _manifest(docker_registry, "t-emu/first", "one")

    _save(api, "again", first, f"{docker_registry.host}/t-emu/second:two")

    manifest = _manifest(docker_registry, "t-emu/second", "two")
    assert manifest["layers"][0] == base["layers"][0]
    assert len(manifest["layers"]) == 2
    digest = docker_registry.manifest("t-emu/first", "one").headers["Docker-Content-Digest"]
    assert manifest["annotations"] == {
        "org.opencontainers.image.base.name": first,
        "org.opencontainers.image.base.digest": digest,
    }
    config = docker_registry.config("t-emu/second", manifest)
    base_config = docker_registry.config("t-emu/first", base)
    assert config["rootfs"]["diff_ids"][:1] == base_config["rootfs"]["diff_ids"]
    assert len(config["rootfs"]["diff_ids"]) == 2
    assert len(config["history"]) == len(base_config["history"]) + 1
    # the new repository holds the base's layer itself (mounted, not only referenced)
    assert docker_registry.blob("t-emu/second", base["layers"][0]["digest"])


def test_a_registry_that_cannot_be_reached_fails_the_push(
    emu: KubeEmulator, api: client.CoreV1Api, docker_registry: DockerRegistry
) -> None:
    from tests.registry import _free_port

    closed = f"127.0.0.1:{_free_port()}"
    emu.set_registry(f"http://{closed}")
    _changed_instance(emu, api)
    body = _build_pod("save", "sys")
    body["spec"]["containers"][0]["args"] = ["--new_tag", f"{closed}/t-emu/x:y"]
    body["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
    api.create_namespaced_pod(NS, body)

    pod = _phase(api, "save", "Failed")

    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 1
    assert f"pushing {closed}/t-emu/x:y" in (terminated.message or "")


def test_without_a_registry_or_for_another_host_nothing_is_pushed(
    emu: KubeEmulator, api: client.CoreV1Api, docker_registry: DockerRegistry
) -> None:
    emu.set_registry(docker_registry.url)
    _changed_instance(emu, api)
    target = "registry.example.com/t-emu/elsewhere:one"

    _save(api, "save", BASE, target)

    assert "t-emu/elsewhere" not in docker_registry.catalog()
    assert emu.images.layers[target][-1] == 3_000_006
    emu.reset()  # back to the model only, as the emulator was started
    assert emu.images.registry_url is None
