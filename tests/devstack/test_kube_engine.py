"""The kube emulator's inference-engine stand-in on the Service network: an endpoint pod answers
as an OpenAI-compatible server (the official `openai` client parses it), Ready only after its
model-load time, with a per-request latency served concurrently, and a container can be made
to crash once."""

from __future__ import annotations

import functools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
import requests
from kubernetes import client

from devstack.kube import KubeEmulator
from tests.devstack import GPU_TOLERATION, wait_for

NS = "default"
MODEL = "acme/llama-3-8b-instruct"


def engine_pod(name: str, *, endpoint: str = "chat", **env: str) -> dict[str, Any]:
    variables = {"STARVERSE_ENGINE": "vllm", "STARVERSE_MODEL_NAME": MODEL, **env}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": endpoint, "starverse.io/endpoint": endpoint}},
        "spec": {
            "tolerations": [GPU_TOLERATION],
            "containers": [
                {
                    "name": "engine",
                    "image": "vllm/vllm-openai:v0.6.0",
                    "ports": [{"containerPort": 8000, "name": "http"}],
                    "env": [{"name": k, "value": v} for k, v in variables.items()],
                }
            ],
        },
    }


def service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": "http"}]},
    }


def ready(api: client.CoreV1Api, name: str) -> bool:
    pod = api.read_namespaced_pod(name, NS)
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def serve(api: client.CoreV1Api, *pods: dict[str, Any]) -> None:
    api.create_namespaced_service(NS, service("chat"))
    for body in pods:
        api.create_namespaced_pod(NS, body)
    for body in pods:
        name: str = body["metadata"]["name"]
        wait_for(functools.partial(ready, api, name), "engine ready")


def call(emu: KubeEmulator, method: str, path: str, **kwargs: Any) -> requests.Response:
    host = emu.service_host(NS, "chat", 80)
    headers = {"Host": host, **kwargs.pop("headers", {})}
    return requests.request(method, emu.url + path, headers=headers, timeout=10, **kwargs)


def engine_client(emu: KubeEmulator) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{emu.url}/v1",
        api_key="unused",
        default_headers={"Host": emu.service_host(NS, "chat", 80)},
        max_retries=0,
    )


def test_the_openai_client_reads_models_chat_and_completions(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    serve(api, engine_pod("chat-0"))
    engine = engine_client(emu)

    assert [m.id for m in engine.models.list().data] == [MODEL]
    chat = engine.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello there world"},
        ],
    )
    assert chat.object == "chat.completion"
    assert chat.model == MODEL
    assert chat.choices[0].message.content == "Echo: hello there world"
    assert chat.choices[0].finish_reason == "stop"
    assert chat.usage is not None
    assert (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (5, 4)
    assert chat.usage.total_tokens == 9
    cut = engine.completions.create(model=MODEL, prompt="one two three four", max_tokens=2)
    assert cut.object == "text_completion"
    assert (cut.choices[0].text, cut.choices[0].finish_reason) == ("Echo: one", "length")
    assert cut.usage is not None
    assert cut.usage.prompt_tokens == 4


def test_streamed_chat_arrives_as_server_sent_events(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    serve(api, engine_pod("chat-0"))
    stream = engine_client(emu).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "stream me"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: stream me"
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == 3
    raw = call(emu, "POST", "/v1/completions", json={"prompt": "hi", "stream": True})
    assert raw.headers["Content-Type"] == "text/event-stream"
    assert raw.text.endswith("data: [DONE]\n\n")


def test_bad_requests_get_openai_style_errors(emu: KubeEmulator, api: client.CoreV1Api) -> None:
    serve(api, engine_pod("chat-0"))
    engine = engine_client(emu)

    with pytest.raises(openai.BadRequestError) as missing:
        engine.chat.completions.create(model=MODEL, messages=[])
    assert isinstance(missing.value.body, dict)
    assert missing.value.body["param"] == "messages"
    no_prompt = call(emu, "POST", "/v1/completions", json={"model": MODEL})
    assert no_prompt.status_code == 400
    assert no_prompt.json()["error"]["param"] == "prompt"
    with pytest.raises(openai.NotFoundError):
        engine.chat.completions.create(model="other", messages=[{"role": "user", "content": "x"}])
    assert call(emu, "GET", "/v1/chat/completions").status_code == 405
    assert call(emu, "GET", "/health").status_code == 200


def test_an_endpoint_pod_is_ready_and_healthy_only_after_its_model_loads(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    api.create_namespaced_service(NS, service("chat"))
    with emu.paused():
        api.create_namespaced_pod(NS, engine_pod("chat-0", STARVERSE_STANDIN_LOAD_S="30"))
        for _ in range(6):
            emu.step(0.1)
        pod = api.read_namespaced_pod("chat-0", NS)
        assert pod.status.phase == "Running"
        assert pod.status.container_statuses[0].started is True
        assert pod.status.container_statuses[0].ready is False
        assert not ready(api, "chat-0")
        assert call(emu, "GET", "/health").status_code == 503
        emu.step(29.0)
        assert not ready(api, "chat-0")
        emu.step(1.0)
        assert ready(api, "chat-0")
        assert call(emu, "GET", "/health").status_code == 200


def test_concurrent_requests_are_served_concurrently_by_the_ready_pods_in_turn(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    serve(
        api,
        engine_pod("chat-0", STARVERSE_STANDIN_LATENCY_MS="400"),
        engine_pod("chat-1", STARVERSE_STANDIN_LATENCY_MS="400"),
    )

    def ask(index: int) -> requests.Response:
        return call(emu, "POST", "/v1/completions", json={"prompt": f"request {index}"})

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(ask, range(8)))
    elapsed = time.monotonic() - started

    assert [a.status_code for a in answers] == [200] * 8
    assert elapsed < 2.0  # one after another would take 3.2 s
    assert {a.headers["X-Starverse-Pod"] for a in answers} == {"chat-0", "chat-1"}


def test_a_crashed_container_restarts_once_and_is_ready_again(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    serve(api, engine_pod("chat-0"))
    with emu.paused():
        emu.crash_container(NS, "chat-0")
        crashed = api.read_namespaced_pod("chat-0", NS)
        status = crashed.status.container_statuses[0]
        assert status.restart_count == 1
        assert status.state.waiting.reason == "CrashLoopBackOff"
        assert status.last_state.terminated.exit_code == 1
        assert not ready(api, "chat-0")
        assert call(emu, "GET", "/health").status_code == 503
        emu.step(0.1)
    again = api.read_namespaced_pod("chat-0", NS)
    assert again.status.phase == "Running"
    assert again.status.container_statuses[0].restart_count == 1
    assert again.status.container_statuses[0].state.running is not None
    assert again.status.pod_ip == crashed.status.pod_ip
    assert ready(api, "chat-0")
    with pytest.raises(ValueError, match="no container 'sidecar'"):
        emu.crash_container(NS, "chat-0", "sidecar")
