"""What users do during a chaos run, over the real HTTP API, and what each 2xx answer
promised (checked at the end by tests/chaos/invariants.py): orders (with an Idempotency-Key,
asked again after a connection that broke, as a client does), terminations, top-ups paid at
the Stripe stand-in's checkout; and what the emulator's pods really did, sampled each second."""

import threading
import time
import urllib.parse
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.chaos.stack import KUBE_TOKEN

RETRIES = 8  # a request that found no server (a web process killed, restarting) is asked again


@dataclass
class Promises:
    """What the platform answered 2xx to: the checks hold it to each."""

    orders: dict[str, str] = field(default_factory=dict)  # idempotency key → instance id
    terminated: dict[str, float] = field(default_factory=dict)  # instance id → when (epoch s)
    topups: dict[str, int] = field(default_factory=dict)  # top-up id → amount_fen (paid)
    requests: int = 0
    answered_5xx: int = 0
    connection_errors: int = 0


class Users:
    """The run's users, each with an API token, sending their requests to the console."""

    def __init__(self, base_url: str, tokens: list[str], offering: str, image: str) -> None:
        self.base_url, self.tokens = base_url, tokens
        self.offering, self.image = offering, image
        self.promises = Promises()
        self._lock = threading.Lock()

    def call(self, token: str, method: str, path: str, **kwargs: Any) -> requests.Response | None:
        """The request, asked again (same headers, so the same Idempotency-Key) while no server
        answers or one answers 5xx; None when every try failed."""
        headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
        for attempt in range(RETRIES):
            with self._lock:
                self.promises.requests += 1
            try:
                answer = requests.request(
                    method, self.base_url + path, headers=headers, timeout=30, **kwargs
                )
            except requests.RequestException:
                with self._lock:
                    self.promises.connection_errors += 1
                time.sleep(0.5 * (attempt + 1))
                continue
            if answer.status_code < 500:
                return answer
            with self._lock:
                self.promises.answered_5xx += 1
            time.sleep(0.5 * (attempt + 1))
        return None

    def order(self, user: int) -> str | None:
        key = uuid.uuid4().hex
        body = {"offering": self.offering, "image": self.image}
        answer = self.call(
            self.tokens[user], "POST", "/api/v1/instances", json=body,
            headers={"Idempotency-Key": key},
        )  # fmt: skip
        if answer is not None and answer.status_code == 202:
            instance = str(answer.json()["id"])
            with self._lock:
                self.promises.orders[key] = instance
            return instance
        return None

    def terminate(self, user: int, instance: str) -> bool:
        answer = self.call(self.tokens[user], "DELETE", f"/api/v1/instances/{instance}")
        if answer is not None and answer.status_code == 202:
            with self._lock:
                self.promises.terminated.setdefault(instance, time.time())
            return True
        return False

    def topup(self, user: int, amount_fen: int = 10_000) -> str | None:
        """A top-up created and paid by card at the stand-in's checkout (which then delivers
        its signed webhook to the console, retrying as Stripe does)."""
        path = "/api/v1/billing/topups"
        answer = self.call(self.tokens[user], "POST", path, json={"amount_fen": amount_fen})
        if answer is None or answer.status_code != 201:
            return None
        made = answer.json()
        paid = requests.post(
            made["checkout_url"], data={"method": "card"}, allow_redirects=False, timeout=30
        )
        if paid.status_code != 303:
            return None
        with self._lock:
            self.promises.topups[str(made["id"])] = amount_fen
        return str(made["id"])


@dataclass
class PodSpan:
    """One pod as the sampler saw it running: its instance label, node, first and last sight."""

    label: str
    node: str
    first: float
    last: float


class PodSampler(threading.Thread):
    """Lists the emulator's pods each second straight from it (not through the proxy the
    platform uses): how long each instance's pods really ran, how long each endpoint replica's
    pod was Ready, and whether a node ever had more GPUs requested by its live pods than it
    has; and reads the simulated trainers' checkpoints (``<volume>/ckpt/step`` in the
    emulator's data directory): a step that went back is kept in ``rewound``."""

    def __init__(self, kube_url: str, gpus_per_node: int = 8, volumes: Path | None = None) -> None:
        super().__init__(daemon=True)
        self.kube_url, self.gpus_per_node, self.volumes = kube_url, gpus_per_node, volumes
        self.spans: dict[str, PodSpan] = {}
        self.ready: dict[str, PodSpan] = {}  # a replica pod's Ready stretches, by pod uid
        self.overbooked: list[str] = []
        self.steps: dict[str, int] = {}  # checkpoint file → the last step it held
        self.rewound: list[str] = []
        self.samples = 0
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.wait(1.0):
            self._checkpoints()
            try:
                pods = self._pods()
            except (requests.RequestException, ValueError):
                continue
            self._sample(pods, time.time())

    def _checkpoints(self) -> None:
        for path in self.volumes.glob("pvc-*/ckpt/step") if self.volumes else []:
            try:
                text = path.read_text().strip()
                step = int(text)
            except (OSError, ValueError):
                continue  # being written (empty for a moment), or its volume removed meanwhile
            before = self.steps.get(str(path), 0)
            if step < before:
                self.rewound.append(f"{path.parent.parent.name}: step {before} then {step}")
            self.steps[str(path)] = step

    def stop(self) -> None:
        self._stop.set()

    def pods_now(self) -> list[dict[str, Any]]:
        """The emulator's pods at this moment."""
        return self._pods()

    def _pods(self) -> list[dict[str, Any]]:
        answer = requests.get(
            f"{self.kube_url}/api/v1/pods",
            headers={"Authorization": f"Bearer {KUBE_TOKEN}"},
            timeout=5,
        )
        answer.raise_for_status()
        return list(answer.json()["items"])

    def _sample(self, pods: list[dict[str, Any]], now: float) -> None:
        gpus: dict[str, int] = defaultdict(int)
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            node = pod["spec"].get("nodeName")
            if not node or pod["metadata"].get("deletionTimestamp"):
                continue
            if pod.get("status", {}).get("phase") in ("Pending", "Running"):
                gpus[node] += sum(_gpus(c) for c in pod["spec"]["containers"])
            uid, label = pod["metadata"]["uid"], labels.get("starverse.io/instance")
            if label and pod.get("status", {}).get("phase") == "Running":
                span = self.spans.setdefault(uid, PodSpan(label, node, now, now))
                span.last = now
            if labels.get("starverse.io/endpoint") and _ready(pod):
                span = self.ready.setdefault(uid, PodSpan(pod["metadata"]["name"], node, now, now))
                span.last = now
        self.overbooked += [
            f"{node}: {count} GPUs requested" for node, count in gpus.items()
            if count > self.gpus_per_node
        ]  # fmt: skip
        self.samples += 1

    def ready_seconds(self, pod_name: str, until: float | None = None) -> float:
        """How long an endpoint replica's pod (by name) was seen Ready, up to `until` (its
        endpoint's delete was answered: billing ends there, the pod may serve on a while)."""
        return sum(
            max(0.0, (s.last if until is None else min(s.last, until)) - s.first)
            for s in self.ready.values()
            if s.label == pod_name
        )

    def running_seconds(
        self, label: str, until: float | None, unbilled: Sequence[tuple[float, float]] = ()
    ) -> float:
        """How long the instance's pods ran, up to `until` (its termination was answered),
        less their time within the `unbilled` stretches (start, end: epoch seconds)."""
        total = 0.0
        for span in self.spans.values():
            if span.label == label:
                end = span.last if until is None else min(span.last, until)
                total += max(0.0, end - span.first)
                for start, stop in unbilled:
                    total -= max(0.0, min(end, stop) - max(span.first, start))
        return total


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _gpus(container: dict[str, Any]) -> int:
    limits = (container.get("resources") or {}).get("limits") or {}
    return int(limits.get("nvidia.com/gpu", 0))


def instance_label(instance_id: str) -> str:
    """The starverse.io/instance label of an instance's pod (instances.provisioning)."""
    return urllib.parse.unquote(instance_id).lower().replace("_", "-")
