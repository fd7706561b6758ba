"""End to end over real HTTP on one machine: an endpoint is made, its replica placed, bound
and Ready on the kube emulator, then called through the development gateway (the console's
key check on a live server, then the engine stand-in) with raw HTTP and with the `openai`
client; requests without a valid key never reach it; its statistics and cost are recorded;
deleting it frees its GPUs."""

import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import requests

from compute.models import Allocation
from devstack.gateway import DevGateway
from devstack.kube import KubeEmulator
from endpoints.manifests import endpoint_host
from endpoints.metrics import endpoint_metrics, samples_collect
from endpoints.models import Endpoint, EndpointReplica
from endpoints.provisioning import endpoint_converge
from endpoints.scheduler import endpoints_sync
from endpoints.services import endpoint_delete, key_create
from tests.factories import make_endpoint, make_user


@pytest.fixture
def gateway(live_server: Any, cluster: KubeEmulator, settings: Any) -> Iterator[DevGateway]:
    with DevGateway(
        auth_url=f"{live_server.url}/gateway/auth",
        kube_url=cluster.url,
        cold_start_timeout_s=2,
        auth_cache_s=0.2,
    ) as running:
        settings.GATEWAY_DOMAIN = f"localhost:{running.port}"
        yield running


def _until(condition, timeout=15.0, step=None):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        if step is not None:
            step()
        time.sleep(0.02)


def _running(endpoint):
    endpoint_converge(endpoint.id)
    _until(lambda: Endpoint.objects.get(pk=endpoint.pk).status == "running", step=endpoints_sync)
    endpoint.refresh_from_db()
    return endpoint


def _post(gateway, endpoint, path, body, key=None):
    headers = {"Host": endpoint_host(endpoint.id), "Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return requests.post(gateway.url + path, data=json.dumps(body), headers=headers, timeout=10)


def test_serve_call_with_a_key_count_and_delete(catalog, gateway, transactional_db):
    endpoint = _running(make_endpoint(make_user(), min_replicas=1, max_replicas=1))
    _row, key = key_create(endpoint=endpoint, name="ci", user=endpoint.created_by)
    chat = {"model": "qwen", "messages": [{"role": "user", "content": "hello there"}]}

    refused = _post(gateway, endpoint, "/v1/chat/completions", chat)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"
    wrong = _post(gateway, endpoint, "/v1/chat/completions", chat, key="sk-sv-nope")
    assert wrong.status_code == 401
    assert gateway.hosts == {}  # refused before the interceptor: nothing reached a replica

    answer = _post(gateway, endpoint, "/v1/chat/completions", chat, key=key)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "qwen"
    assert body["choices"][0]["message"]["role"] == "assistant"

    # the openai client, as users call it (its host resolves to the gateway through a header)
    client = openai.OpenAI(
        base_url=gateway.url + "/v1",
        api_key=key,
        default_headers={"Host": endpoint_host(endpoint.id)},
        max_retries=0,
    )
    completion = client.chat.completions.create(
        model="qwen", messages=[{"role": "user", "content": "say something"}]
    )
    assert completion.choices[0].message.content
    assert [m.id for m in client.models.list().data] == ["qwen"]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=gateway.url + "/v1",
            api_key="sk-sv-wrong",
            default_headers={"Host": endpoint_host(endpoint.id)},
            max_retries=0,
        ).models.list()

    # the gateway's counts become the endpoint's series
    assert samples_collect(f"{gateway.url}/__devgateway/stats") == 1
    point = endpoint_metrics(endpoint)[-1]
    assert point["requests_per_s"] > 0
    assert point["tokens_per_s"] > 0
    assert point["latency_p50_ms"] is not None
    assert point["replicas_ready"] == 1

    replica = EndpointReplica.objects.get(endpoint=endpoint)
    assert Allocation.objects.filter(holding__replica=replica).count() == 1
    endpoint_delete(endpoint=endpoint)  # its task runs at commit (eager in tests)
    endpoint_converge(endpoint.id)
    assert Endpoint.objects.get(pk=endpoint.pk).status == "deleted"
    _until(
        lambda: EndpointReplica.objects.get(pk=replica.pk).gone_at is not None, step=endpoints_sync
    )
    assert not Allocation.objects.filter(holding__replica=replica).exists()
    # once the gateway's check cache lapses, the deleted endpoint's key no longer passes
    _until(lambda: _post(gateway, endpoint, "/v1/models", {}, key=key).status_code == 401)


def test_a_request_to_an_endpoint_at_zero_is_held_then_answered_503_in_openais_shape(
    catalog, gateway, transactional_db
):
    endpoint = make_endpoint(make_user(), min_replicas=0, max_replicas=1)
    endpoint_converge(endpoint.id)
    endpoint.refresh_from_db()
    _row, key = key_create(endpoint=endpoint, name="ci", user=endpoint.created_by)
    started = time.monotonic()
    answer = _post(gateway, endpoint, "/v1/completions", {"model": "qwen", "prompt": "hi"}, key=key)
    assert time.monotonic() - started >= 2, (
        answer.status_code,
        answer.text[:300],
    )  # held for the cold start timeout
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "endpoint_starting"


@pytest.fixture
def autoscaled(cluster: KubeEmulator, gateway: DevGateway, settings: Any) -> Iterator[None]:
    """The emulator's KEDA stand-in reading the gateway's in-flight counts every 0.1 s, one
    request in flight per replica, a scale-down after 1 s idle, 300 ms per request."""
    settings.ENDPOINT_TARGET_CONCURRENCY = 1
    settings.ENDPOINT_SCALEDOWN_PERIOD_S = 1
    network = cluster._ctx.network
    assert network is not None
    interval, latency = cluster.keda.polling_interval_s, network.latency_ms
    cluster.keda.polling_interval_s = 0.1
    network.latency_ms = 300
    cluster.set_keda_queue_url(f"{gateway.url}/__devgateway/queue")
    yield
    cluster.set_keda_queue_url(None)
    cluster.keda.polling_interval_s, network.latency_ms = interval, latency


def _burst(gateway, endpoint, key, stop, answers):
    while not stop.is_set():
        body = {"model": "qwen", "messages": [{"role": "user", "content": "burst"}]}
        answers.append(_post(gateway, endpoint, "/v1/chat/completions", body, key=key).status_code)


def test_a_burst_scales_up_to_max_and_idle_scales_back_to_min(
    catalog, gateway, autoscaled, transactional_db
):
    import threading

    endpoint = _running(make_endpoint(make_user(), min_replicas=1, max_replicas=2))
    _row, key = key_create(endpoint=endpoint, name="ci", user=endpoint.created_by)
    stop, answers = threading.Event(), list[int]()
    threads = [
        threading.Thread(target=_burst, args=(gateway, endpoint, key, stop, answers))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    try:
        _until(
            lambda: Endpoint.objects.get(pk=endpoint.pk).replicas_ready == 2,
            step=endpoints_sync,
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert set(answers) == {200}
    assert EndpointReplica.objects.filter(endpoint=endpoint, gone_at__isnull=True).count() == 2
    assert Allocation.objects.filter(holding__replica__endpoint=endpoint).count() == 2
    # idle: back to its minimum, the second replica's GPU given back
    _until(
        lambda: (
            EndpointReplica.objects.filter(endpoint=endpoint, gone_at__isnull=True).count() == 1
        ),
        step=endpoints_sync,
    )
    assert Allocation.objects.filter(holding__replica__endpoint=endpoint).count() == 1
    assert Endpoint.objects.get(pk=endpoint.pk).status == "running"


def test_the_first_request_at_zero_waits_for_a_cold_start(
    catalog, gateway, autoscaled, transactional_db
):
    import threading

    endpoint = make_endpoint(make_user(), min_replicas=0, max_replicas=1)
    endpoint_converge(endpoint.id)
    endpoint.refresh_from_db()
    gateway.cold_start_timeout_s = 15
    _row, key = key_create(endpoint=endpoint, name="ci", user=endpoint.created_by)
    answers: list[int] = []
    stop = threading.Event()
    caller = threading.Thread(
        target=lambda: answers.append(
            _post(
                gateway, endpoint, "/v1/completions", {"model": "qwen", "prompt": "hi"}, key
            ).status_code
        )
    )
    caller.start()
    try:
        # the scheduler binds what the autoscaler adds while the request is held
        _until(lambda: bool(answers), step=endpoints_sync)
    finally:
        stop.set()
        caller.join()
    assert answers == [200]
    endpoint.refresh_from_db()
    assert endpoint.status == "running"
    assert endpoint.cold_start_s is not None
    # idle again: back to zero, nothing held
    _until(
        lambda: Endpoint.objects.get(pk=endpoint.pk).status == "scaled_to_zero",
        step=endpoints_sync,
    )
    assert not Allocation.objects.filter(holding__replica__endpoint=endpoint).exists()
