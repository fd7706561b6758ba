"""The kube emulator's KEDA HTTP add-on stand-in through the official kubernetes client: it
reads in-flight counts per host from a local URL (here a tiny HTTP server standing in for the
dev gateway) and scales each HTTPScaledObject's Deployment up at once and down after its
scale-down period."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.kube import KubeEmulator
from tests.devstack import start_emulator, wait_for
from tests.devstack.test_kube_deployments import deployment_body
from tests.stubs import StubServer

NS = "default"
GROUP, VERSION, PLURAL = "http.keda.sh", "v1alpha1", "httpscaledobjects"
HOST = "chat.acme.endpoints.starverse.test"


class Counts:
    """A stand-in for the dev gateway's admin URL serving in-flight counts per host."""

    def __init__(self) -> None:
        self.document: dict[str, Any] = {}
        self.requests = 0
        self.stub = StubServer(self._answer, "/queue")
        self.url = self.stub.url

    def _answer(self, _headers: Any) -> tuple[int, bytes]:
        self.requests += 1
        return 200, json.dumps(self.document).encode()

    def set(self, concurrency: int) -> None:
        self.document = {HOST: {"concurrency": concurrency}, "other.host": {"concurrency": 50}}

    def close(self) -> None:
        self.stub.close()


@pytest.fixture
def counts() -> Iterator[Counts]:
    served = Counts()
    yield served
    served.close()


@pytest.fixture
def keda_emu(counts: Counts) -> Iterator[KubeEmulator]:
    emulator = start_emulator(keda_queue_url=counts.url, keda_polling_interval_s=0.05)
    yield emulator
    emulator.stop()


def clients(emu: KubeEmulator) -> tuple[client.AppsV1Api, client.CustomObjectsApi]:
    cfg = client.Configuration()
    cfg.host = emu.url
    api_client = client.ApiClient(cfg)
    return client.AppsV1Api(api_client), client.CustomObjectsApi(api_client)


def scaled_object(
    name: str, low: int = 0, high: int = 4, target: int = 2, period: int = 30
) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HTTPScaledObject",
        "metadata": {"name": name},
        "spec": {
            "hosts": [HOST],
            "scaleTargetRef": {
                "name": name,
                "kind": "Deployment",
                "apiVersion": "apps/v1",
                "service": name,
                "port": 80,
            },
            "replicas": {"min": low, "max": high},
            "scalingMetric": {"concurrency": {"targetValue": target}},
            "scaledownPeriod": period,
        },
    }


def replicas(apps: client.AppsV1Api, name: str = "chat") -> int:
    return int(apps.read_namespaced_deployment(name, NS).spec.replicas)


def test_a_scaledown_period_met_in_floating_point_steps_is_met(
    keda_emu: KubeEmulator, counts: Counts
) -> None:
    """Thirty seconds of the emulated clock, added up in floating point, may come out a hair
    under thirty (1000.1 + 29.0 + 1.0 - 1000.1 == 29.999999999999886): the period is met. The
    ticks' times are chosen ahead of the emulator's clock so that the sum falls short."""
    apps, custom = clients(keda_emu)
    apps.create_namespaced_deployment(NS, deployment_body("chat", 1))
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, scaled_object("chat"))
    with keda_emu.paused():  # only the ticks below scale
        counts.set(0)
        keda_emu.keda.refresh()
        since = keda_emu.now() + 1.0
        while (since + 29.0) + 1.0 - since >= 30.0:
            since += 0.1
        keda_emu.keda.tick(since)  # wants 0 from here
        assert replicas(apps) == 1
        later = (since + 29.0) + 1.0
        assert later - since < 30.0
        keda_emu.keda.tick(later)
        assert replicas(apps) == 0


def test_scales_up_at_once_and_down_after_the_scaledown_period(
    keda_emu: KubeEmulator, counts: Counts
) -> None:
    apps, custom = clients(keda_emu)
    apps.create_namespaced_deployment(NS, deployment_body("chat", 0))
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, scaled_object("chat"))

    counts.set(3)  # the poller thread reads it by itself: ceil(3 / 2) = 2
    wait_for(lambda: replicas(apps) == 2, "scaled up to 2")
    status = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "chat")["status"]
    [ready] = status["conditions"]
    assert (ready["type"], ready["status"]) == ("Ready", "True")
    assert status["targetWorkload"] == "apps/v1/Deployment/chat"

    with keda_emu.paused():
        counts.set(11)
        keda_emu.keda.refresh()
        keda_emu.step(0.1)
        assert replicas(apps) == 4  # ceil(11 / 2) = 6, clamped to max 4
        counts.set(1)
        keda_emu.keda.refresh()
        keda_emu.step(0.1)
        keda_emu.step(29.0)
        assert replicas(apps) == 4  # wants 1, still cooling down
        keda_emu.step(1.0)
        assert replicas(apps) == 1
        counts.set(0)
        keda_emu.keda.refresh()
        keda_emu.step(0.1)
        keda_emu.step(29.0)
        assert replicas(apps) == 1
        counts.set(2)  # busy again within the period: the cool-down starts over
        keda_emu.keda.refresh()
        keda_emu.step(0.1)
        counts.set(0)
        keda_emu.keda.refresh()
        keda_emu.step(0.1)
        keda_emu.step(29.0)
        assert replicas(apps) == 1
        keda_emu.step(1.0)
        assert replicas(apps) == 0
    deployment = apps.read_namespaced_deployment("chat", NS)
    assert deployment.metadata.generation == 5  # each rescale went through the API
    assert counts.requests > 0


def test_without_a_queue_url_concurrency_is_zero_and_min_replicas_hold(
    emu: KubeEmulator,
) -> None:
    apps, custom = clients(emu)
    apps.create_namespaced_deployment(NS, deployment_body("chat", 0))
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, scaled_object("chat", 1))
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, scaled_object("ghost"))

    wait_for(lambda: replicas(apps) == 1, "scaled to min 1")

    def condition() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "ghost")
        found = (obj.get("status") or {}).get("conditions")
        return found[0] if found else None

    ghost = wait_for(condition, "the missing target reported")
    assert (ghost["status"], ghost["reason"]) == ("False", "ScaleTargetNotFound")
    assert ghost["message"] == 'Deployment "ghost" not found'


def test_an_http_scaled_object_needs_a_target_and_sane_bounds(emu: KubeEmulator) -> None:
    _, custom = clients(emu)
    body = scaled_object("chat", low=3, high=1)
    body["spec"]["scaleTargetRef"].pop("name")
    with pytest.raises(ApiException) as denied:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    assert denied.value.status == 422
    fields = {c["field"] for c in json.loads(denied.value.body)["details"]["causes"]}
    assert fields == {"spec.scaleTargetRef.name", "spec.replicas"}
    assert custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"] == []
