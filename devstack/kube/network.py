"""The cluster's Service network as the Kubernetes API emulator (a development stand-in, not
for production) stands in for it: nothing runs in an emulated pod, so an HTTP request to a
Service's port is answered by a small stand-in page of the pod behind it.

The emulator's own address serves it: a request whose Host names a Service the way cluster DNS
does, ``<service>.<namespace>.svc[.cluster.local]:<port>``, goes to that Service's port, not to
the API (no credentials: this is the pod network, which the tenant NetworkPolicy guards on a
real cluster). Like kube-proxy it answers only for the ports the Service declares, and only
when a Running, Ready pod matches its selector. The port that targets 8888 (Jupyter) stands in
for JupyterLab with token authentication: it answers 403 unless the request carries the pod's
token (``jupyter_token`` of the Secret it mounts) as ``Authorization: token <token>``.

A pod with the ``starverse.io/endpoint`` label, or a container with a ``STARVERSE_ENGINE``
env (``vllm``, ``tensorrt-llm``), answers on any Service port as an OpenAI-compatible inference
engine (:mod:`.engine`). Several ready pods behind a Service answer in turn, and requests are
served concurrently (one thread per connection), so in-flight counts can be exercised.
"""

from __future__ import annotations

import base64
import html
import re
from typing import Any

from .engine import Answer, engine_of
from .resources import PODS, SECRETS, SERVICES
from .store import Store

Obj = dict[str, Any]
SERVICE_HOST = re.compile(
    r"^(?P<service>[a-z0-9-]+)\.(?P<namespace>[a-z0-9-]+)\.svc(?:\.cluster\.local)?"
    r"(?::(?P<port>[0-9]{1,5}))?$"
)
JUPYTER_PORT = 8888
KNOWN = {6006: "TensorBoard", 7860: "Gradio", 8000: "HTTP API", JUPYTER_PORT: "JupyterLab"}


def service_address(host: str) -> tuple[str, str, int] | None:
    """(namespace, service, port) of a Service's cluster DNS name, else None."""
    found = SERVICE_HOST.match(host.strip().lower())
    if found is None:
        return None
    return found["namespace"], found["service"], int(found["port"] or 80)


def _page(status: int, title: str, text: str) -> Answer:
    body = (
        "<!doctype html><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(text)}</p>"
        "<p><small>Kube emulator: a development stand-in, nothing runs in this pod.</small></p>"
    )
    return Answer(status, body.encode(), {"Content-Type": "text/html; charset=utf-8"})


def _ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _target(port: Obj, pod: Obj) -> int | None:
    """The container port a Service port targets (a number, or a name of a container port)."""
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int):
        return target
    for container in (pod.get("spec") or {}).get("containers") or []:
        for declared in container.get("ports") or []:
            if declared.get("name") == target:
                return int(declared["containerPort"])
    return None


class ServiceNetwork:
    """Answers requests to Services' ports with the stand-in of a pod behind them, taking the
    Service's ready pods in turn."""

    def __init__(self, store: Store, latency_ms: float = 0.0) -> None:
        self.store = store
        self.latency_ms = latency_ms  # the engine stand-in's default per-request latency
        self._turn: dict[tuple[str, str], int] = {}

    def answer(
        self,
        namespace: str,
        service: str,
        port: int,
        path: str,
        headers: dict[str, str],
        method: str = "GET",
        body: bytes = b"",
    ) -> Answer:
        with self.store.lock:
            svc = self.store.get(SERVICES, namespace, service)
            if svc is None:
                return _page(502, "Bad gateway", f"no Service {namespace}/{service}")
            spec = svc.get("spec") or {}
            declared = next((p for p in spec.get("ports") or [] if p.get("port") == port), None)
            if declared is None:
                return _page(502, "Bad gateway", f"Service {service} has no port {port}")
            selector = spec.get("selector") or {}
            pods = [
                pod
                for pod in self.store.items(PODS, namespace)
                if selector
                and all(
                    (pod["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items()
                )
                and _ready(pod)
            ]
            if not pods:
                return _page(503, "Service unavailable", "no endpoints available for service")
            turn = self._turn.get((namespace, service), 0)
            self._turn[(namespace, service)] = turn + 1
            pod = pods[turn % len(pods)]
            target = _target(declared, pod)
            token = self._jupyter_token(pod) if target == JUPYTER_PORT else None
            engine = engine_of(pod, self.latency_ms) if target != JUPYTER_PORT else None
        name = f"{namespace}/{pod['metadata']['name']}"
        if target == JUPYTER_PORT:
            if token is None or headers.get("authorization", "") != f"token {token}":
                return _page(403, "Forbidden", "JupyterLab stand-in: a valid token is required")
            return _page(200, "JupyterLab stand-in", f"JupyterLab of pod {name}, at {path}")
        if engine is not None:
            answer = engine.answer(method, path, body)
            answer.headers["X-Starverse-Pod"] = pod["metadata"]["name"]
            return answer
        what = KNOWN.get(target or 0, "HTTP")
        return _page(200, f"{what} stand-in", f"{what} stand-in on port {target} of pod {name}")

    def _jupyter_token(self, pod: Obj) -> str | None:
        """The pod's Jupyter token, where the image contract puts it (docs/images.md): the key
        ``jupyter_token`` of a Secret the pod mounts, else its ``JUPYTER_TOKEN`` env (a value,
        or the Secret key it points to)."""
        namespace = pod["metadata"].get("namespace", "")
        spec = pod.get("spec") or {}
        for volume in spec.get("volumes") or []:
            name = (volume.get("secret") or {}).get("secretName")
            token = self._secret_value(namespace, name, "jupyter_token") if name else None
            if token is not None:
                return token
        for container in spec.get("containers") or []:
            for env in container.get("env") or []:
                if env.get("name") != "JUPYTER_TOKEN":
                    continue
                if "value" in env:
                    return str(env["value"])
                ref = (env.get("valueFrom") or {}).get("secretKeyRef") or {}
                return self._secret_value(namespace, ref.get("name", ""), ref.get("key", ""))
        return None

    def _secret_value(self, namespace: str, name: str, key: str) -> str | None:
        data = (self.store.get(SECRETS, namespace, name) or {}).get("data") or {}
        return base64.b64decode(data[key]).decode() if key in data else None
