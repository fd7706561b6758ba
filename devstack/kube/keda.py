"""The KEDA HTTP add-on as the Kubernetes API emulator (a development stand-in) plays it.

In production the add-on's interceptor counts in-flight requests per host and KEDA scales each
``HTTPScaledObject``'s Deployment. Here the development gateway plays the interceptor and
serves the in-flight counts per host as JSON at an admin URL, ``{"<host>": {"concurrency":
<int>}}`` (a bare integer per host, or the interceptor's ``Concurrency`` key, is read too); the
emulator is given that URL (``KubeEmulator(keda_queue_url=...)``, the
``KUBE_EMULATOR_KEDA_QUEUE_URL`` env or ``set_keda_queue_url``; without one every count is 0).

A poller thread reads the URL every ``polling_interval_s`` (default 1 s, the
``KUBE_EMULATOR_KEDA_POLLING_INTERVAL`` env) outside the store's lock; each pass of the control
plane at most that often then, for every HTTPScaledObject, sums the concurrency of its
``spec.hosts``, wants ``ceil(concurrency / scalingMetric.concurrency.targetValue)`` replicas
clamped to ``spec.replicas {min, max}``, scales the Deployment of ``spec.scaleTargetRef`` up at
once and down (to zero too) only after ``scaledownPeriod`` seconds (default 300) of wanting
fewer, by patching ``spec.replicas`` through the API (watchers see it, the generation moves),
and writes the ``Ready`` condition in the object's status. Tests drive it with ``refresh()``
and ``step()``.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import urllib.request
from typing import Any

from .api import Api
from .defaults import now_iso
from .errors import ApiError
from .patch import MERGE_PATCH
from .resources import DEPLOYMENTS, HTTP_SCALED_OBJECTS

log = logging.getLogger("devstack.kube")
Obj = dict[str, Any]
COMPONENT = "keda-http-add-on"
FETCH_TIMEOUT_S = 2.0


def concurrency_of(value: Any) -> int:
    """One host's entry of the counts document."""
    if isinstance(value, dict):
        value = value.get("concurrency", value.get("Concurrency", 0))
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def _condition(status: Obj, value: str, reason: str, message: str) -> None:
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
    before = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if before is not None and (
        before.get("status"),
        before.get("reason"),
        before.get("message"),
    ) == (
        value,
        reason,
        message,
    ):
        return
    conditions.append(
        {
            "type": "Ready",
            "status": value,
            "reason": reason,
            "message": message,
            "timestamp": now_iso(),
        }
    )
    status["conditions"] = conditions


CLOCK_EPSILON_S = 1e-6


class KedaStandIn:
    def __init__(self, api: Api, queue_url: str | None, polling_interval_s: float = 1.0) -> None:
        self.api = api
        self.configured_url = queue_url
        self.queue_url = queue_url
        self.polling_interval_s = polling_interval_s
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        # reads are numbered when they start: a slow read never overwrites a newer one's counts
        self._reads = 0
        self._stored = 0
        self._last_pass: float | None = None
        self._below_since: dict[str, float] = {}  # object uid -> since when it wants fewer

    def reset(self) -> None:
        with self._lock:
            self.queue_url = self.configured_url
            self._counts = {}
            self._stored = self._reads  # a read begun before the reset is dropped
        self._last_pass = None
        self._below_since.clear()

    # --- the interceptor's counts ------------------------------------------------------------

    def refresh(self) -> None:
        """Read the in-flight counts per host from the queue URL (never under the store's
        lock); an unreachable or malformed answer keeps the last counts."""
        url = self.queue_url
        with self._lock:
            self._reads += 1
            read = self._reads
        if not url:
            self._store(read, {})
            return
        try:
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:  # noqa: S310 - a configured local URL
                document = json.load(response)
        except (OSError, ValueError) as exc:
            log.warning("kube-emulator keda queue unreadable url=%s error=%s", url, exc)
            return
        if not isinstance(document, dict):
            log.warning("kube-emulator keda queue is not a JSON object url=%s", url)
            return
        self._store(read, {str(host): concurrency_of(v) for host, v in document.items()})

    def _store(self, read: int, counts: dict[str, int]) -> None:
        with self._lock:
            if read > self._stored:
                self._counts, self._stored = counts, read

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    # --- scaling -----------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        if self._last_pass is not None and now - self._last_pass < self.polling_interval_s:
            return
        self._last_pass = now
        counts = self.counts()
        with self.api.store.lock:
            objects = self.api.store.items(HTTP_SCALED_OBJECTS)
            live = {o["metadata"]["uid"] for o in objects}
            for uid in [u for u in self._below_since if u not in live]:
                del self._below_since[uid]
            for scaled in objects:
                if not scaled["metadata"].get("deletionTimestamp"):
                    self._scale(scaled, counts, now)

    def _scale(self, scaled: Obj, counts: dict[str, int], now: float) -> None:
        meta, spec = scaled["metadata"], scaled.get("spec") or {}
        namespace, uid = meta["namespace"], meta["uid"]
        ref = spec.get("scaleTargetRef") or {}
        name = str(ref.get("name") or "")
        kind = ref.get("kind") or "Deployment"
        target = self.api.store.get(DEPLOYMENTS, namespace, name) if kind == "Deployment" else None
        if target is None:
            self._status(scaled, "False", "ScaleTargetNotFound", f'{kind} "{name}" not found')
            return
        concurrency = sum(counts.get(str(host), 0) for host in spec.get("hosts") or [])
        metric = spec.get("scalingMetric") or {}
        per_replica = (metric.get("concurrency") or metric.get("requestRate") or {}).get(
            "targetValue", spec.get("targetPendingRequests", 100)
        )
        per_replica = max(1, int(per_replica or 1))
        bounds = spec.get("replicas") or {}
        low = int(bounds.get("min", 0) or 0)
        high = int(bounds.get("max", 100) or 0)
        desired = min(max(math.ceil(concurrency / per_replica), low), max(high, low))
        current = int((target.get("spec") or {}).get("replicas", 1))
        # the emulated clock adds its steps in floating point: thirty seconds of steps may come
        # out a hair under thirty, so the period is met within a microsecond
        cool_down = float(spec.get("scaledownPeriod", 300)) - CLOCK_EPSILON_S
        if desired > current or (
            desired < current and now - self._below_since.setdefault(uid, now) >= cool_down
        ):
            self._below_since.pop(uid, None)
            try:
                self.api.patch(
                    DEPLOYMENTS, namespace, name, MERGE_PATCH, {"spec": {"replicas": desired}}
                )
            except ApiError as exc:
                self._status(scaled, "False", "ScaleFailed", exc.message)
                return
            self.api.events.record(
                DEPLOYMENTS,
                target,
                "SuccessfulRescale",
                f"New size: {desired}; reason: concurrency {concurrency} for {per_replica} per "
                "replica",
                component=COMPONENT,
            )
        elif desired == current:
            self._below_since.pop(uid, None)
        self._status(
            scaled,
            "True",
            "HTTPScaledObjectIsReady",
            f"the KEDA stand-in scales Deployment {name}",
            f"apps/v1/Deployment/{name}",
        )

    def _status(
        self, scaled: Obj, value: str, reason: str, message: str, workload: str = ""
    ) -> None:
        def write(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            _condition(status, value, reason, message)
            if workload:
                status["targetWorkload"] = workload
            ref = (obj.get("spec") or {}).get("scaleTargetRef") or {}
            if ref.get("service"):
                status["targetService"] = f"{ref['service']}:{ref.get('port', '')}"

        meta = scaled["metadata"]
        self.api.mutate(HTTP_SCALED_OBJECTS, meta["namespace"], meta["name"], write)
