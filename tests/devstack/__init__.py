"""Helpers of the stand-in tests (devstack/): kube emulator clients, waits and manifests. The
shared fixtures (`emu`, `api`, `stripe_fake`) live in the conftest files."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.kube import KubeEmulator
from tests.conftest import KUBE_TIMINGS
from tests.sshd import listening as listening  # the one TCP probe, shared with the sshd tests

KUBECTL = "/usr/bin/kubectl"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def start_emulator(**options: Any) -> KubeEmulator:
    """An emulator of its own, for a test that needs another fleet or options than `emu` has
    (the default fleet unless ``fleet`` or ``nodes`` is given); the test stops it."""
    return KubeEmulator(**{**KUBE_TIMINGS, **options}).start()


def core_api(emu: KubeEmulator) -> client.CoreV1Api:
    cfg = client.Configuration()
    cfg.host = emu.url
    return client.CoreV1Api(client.ApiClient(cfg))


def wait_for(check: Callable[[], Any], what: str = "condition", timeout: float = 5.0) -> Any:
    """Poll until ``check()`` is truthy and return it: for things that must happen."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def error_body(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


def pod_body(
    name: str,
    image: str = "nvcr.io/nvidia/pytorch:24.05-py3",
    gpus: int = 0,
    **spec: Any,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [container], "tolerations": [GPU_TOLERATION], **spec},
    }


def config_map(name: str, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}, **extra},
        "data": {"k": "v"},
    }
