"""Inference endpoint benchmarks, on one machine: the kube emulator (a subprocess, with its
engine stand-in and KEDA stand-in), the console under gunicorn (the gateway's key check) and
the development gateway (playing the KEDA interceptor); the platform's scheduler runs in this
process.

- endpoint_gateway_overhead: requests/s of `GET /v1/models` to an endpoint through the gateway
  (the key check, kept 2 s, and the interceptor's counting) next to the same request straight
  to the engine stand-in's Service on the emulator, measured in turns in the same run.
- endpoint_scale_up: seconds from the start of a burst of requests (4 clients, 200 ms per
  request at the stand-in, one request per replica targeted) to the endpoint's second replica
  Ready: the KEDA stand-in's 1 s poll, the Deployment's new pod, the scheduler's pass (every
  second, as the beat runs it), the bind and the pod's start. The model load is excluded
  (the stand-in loads in 0 s) and reported apart: `endpoint_cold_start_s` is what the
  platform measured for the first replica."""

import http.client
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import database_url, recreate_database, report, setup_django
from bench.gateway import _free_port, _spawn, _wait
from bench.instances import _load, _users

SCHEDULER_PASS_S = 1.0  # endpoints.tasks.sync_endpoints' beat


class Stack:
    """The three processes, and the platform pointed at the emulator."""

    def __init__(self, *, latency_ms: int) -> None:
        self.kube_port, self.web_port, self.gateway_port = _free_port(), _free_port(), _free_port()
        self.domain = f"localhost:{self.gateway_port}"
        self.kubeconfig = Path(tempfile.mkdtemp()) / "kubeconfig"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "DEBUG": "false",
            "LOG_LEVEL": "WARNING",
            "DATABASE_URL": database_url(),
            "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/1"),
            "GATEWAY_DOMAIN": self.domain,
            "PUBLIC_BASE_URL": f"http://127.0.0.1:{self.web_port}",
            "KUBE_ACCESS": "false",
            "STARVERSE_STANDIN_LATENCY_MS": str(latency_ms),
            "KUBE_EMULATOR_KEDA_QUEUE_URL": (
                f"http://127.0.0.1:{self.gateway_port}/__devgateway/queue"
            ),
        }
        self.processes: list[Any] = []

    def __enter__(self) -> "Stack":
        self.processes.append(
            _spawn(
                *("devstack.kube", "--port", str(self.kube_port)),
                *("--kubeconfig", str(self.kubeconfig), "--fleet", "h100=1"),
                *("--log-level", "WARNING", "--pull-delay", "0"),
                env=self.env,
            )
        )
        _wait(self.kube_port)
        for _ in range(100):
            if self.kubeconfig.exists():
                break
            time.sleep(0.05)
        self.processes.append(
            _spawn(
                *("gunicorn", "bench.wsgi:application", "--bind", f"127.0.0.1:{self.web_port}"),
                *("--workers", "2", "--threads", "2", "--log-level", "warning"),
                env=self.env,
            )
        )
        self.processes.append(
            _spawn(
                *("devstack.gateway", "--port", str(self.gateway_port), "--log-level", "WARNING"),
                *("--auth-url", f"http://127.0.0.1:{self.web_port}/gateway/auth"),
                *("--kube-url", f"http://127.0.0.1:{self.kube_port}"),
                env=self.env,
            )
        )
        _wait(self.web_port)
        _wait(self.gateway_port)
        return self

    def __exit__(self, *exc: object) -> None:
        for process in reversed(self.processes):
            process.terminate()
            process.wait(timeout=10)

    def settings(self, **more: Any) -> Any:
        from django.test import override_settings

        return override_settings(
            KUBECONFIG=str(self.kubeconfig),
            GATEWAY_DOMAIN=self.domain,
            CELERY_TASK_ALWAYS_EAGER=False,
            **more,
        )


def _endpoint(prefix: str, *, min_replicas: int, max_replicas: int) -> tuple[Any, str]:
    """An endpoint of a public-pool model, converged and with a Ready replica, and a key."""
    from django.core.management import call_command

    from compute.models import Offering
    from datasets.models import PublicDataset
    from endpoints.models import Endpoint
    from endpoints.provisioning import endpoint_converge
    from endpoints.scheduler import endpoints_sync
    from endpoints.services import endpoint_create, key_create
    from fleet.services import nodes_sync_from_cluster
    from starverse.core import kube

    kube._api_client.cache_clear()
    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    PublicDataset.objects.get_or_create(
        id="bench-model",
        defaults={
            "name": "bench",
            "kind": "model",
            "directory": "bench-model",
            "size_bytes": 1,
            "licence": "MIT",
        },
    )
    user = _users(1, prefix=prefix)[0]
    endpoint, _ = endpoint_create(
        user=user,
        name="bench",
        source={"dataset": "bench-model"},
        engine="vllm",
        offering_id=Offering.objects.get(name="1× H100 80GB SXM").id,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
    )
    endpoint_converge(endpoint.id)
    deadline = time.monotonic() + 30
    while Endpoint.objects.get(pk=endpoint.pk).status != "running":
        assert time.monotonic() < deadline, "the endpoint never ran"
        endpoints_sync()
        time.sleep(0.05)
    endpoint.refresh_from_db()
    _row, key = key_create(endpoint=endpoint, name="bench", user=user)
    return endpoint, key


def endpoint_gateway_overhead() -> dict:
    from endpoints.manifests import endpoint_host

    with Stack(latency_ms=0) as stack, stack.settings():
        endpoint, key = _endpoint("eg", min_replicas=1, max_replicas=1)
        through = [
            ("/v1/models", {"Host": endpoint_host(endpoint.id), "Authorization": f"Bearer {key}"})
        ]
        service = f"{endpoint.k8s_name}.{endpoint.k8s_namespace}.svc.cluster.local:8000"
        straight = [("/v1/models", {"Host": service})]
        _load(stack.gateway_port, through, 1.0)  # warm up
        rounds = [
            (_load(stack.gateway_port, through, 2.0), _load(stack.kube_port, straight, 2.0))
            for _ in range(4)
        ]
    ours = sum(r[0] for r in rounds) / len(rounds)
    baseline = sum(r[1] for r in rounds) / len(rounds)
    return report(
        "endpoint_gateway_overhead",
        ours,
        "req/s",
        baseline,
        "the same request straight to the engine stand-in's Service, no gateway",
        "ratio >= 0.5",
    )


def _burst(port: int, host: str, key: str, stop: threading.Event, *, once: bool = False) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}]})
    headers = {"Host": host, "Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    while once or not stop.is_set():
        once = False
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 200, answer.status
    conn.close()


def endpoint_scale_up() -> list[dict]:
    from endpoints.manifests import endpoint_host
    from endpoints.models import Endpoint
    from endpoints.scheduler import endpoints_sync

    with (
        Stack(latency_ms=200) as stack,
        stack.settings(ENDPOINT_TARGET_CONCURRENCY=1, ENDPOINT_SCALEDOWN_PERIOD_S=30),
    ):
        endpoint, key = _endpoint("es", min_replicas=1, max_replicas=2)
        cold_start = float(endpoint.cold_start_s or 0.0)
        # one request first: the console's check is warm, as it is in service
        warm = threading.Event()
        warm.set()
        _burst(stack.gateway_port, endpoint_host(endpoint.id), key, warm, once=True)
        stop = threading.Event()
        clients = [
            threading.Thread(
                target=_burst,
                args=(stack.gateway_port, endpoint_host(endpoint.id), key, stop),
            )
            for _ in range(4)
        ]
        started = time.monotonic()
        for client in clients:
            client.start()
        try:
            while Endpoint.objects.get(pk=endpoint.pk).replicas_ready < 2:
                assert time.monotonic() - started < 60, "no second replica within a minute"
                endpoints_sync()
                time.sleep(SCHEDULER_PASS_S)
            seconds = time.monotonic() - started
        finally:
            stop.set()
            for client in clients:
                client.join()
    return [
        report(
            "endpoint_scale_up",
            seconds,
            "s",
            5.0,
            "the goal: second replica Ready within 5 s of the burst (model load excluded)",
            "<= 5 s",
        ),
        report(
            "endpoint_cold_start_s",
            cold_start,
            "s",
            0.0,
            "the stand-in's model load (0 s here): a real model adds its load time",
            "reported",
        ),
    ]


def run() -> list[dict]:
    recreate_database()
    setup_django()
    return [endpoint_gateway_overhead(), *endpoint_scale_up()]
