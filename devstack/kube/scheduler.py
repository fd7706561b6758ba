"""The emulated default-scheduler of the Kubernetes API emulator (a development stand-in).

Filters nodes like the real scheduler's default plugins that matter on a GPU fleet —
NodeUnschedulable, TaintToleration, NodeAffinity (nodeSelector and required node affinity) and
NodeResourcesFit (``nvidia.com/gpu``, cpu, memory, pods) — then scores the feasible nodes by
bin-packing GPUs (most allocated first) or spreading CPU-only pods (least allocated first).
Unschedulable pods get ``PodScheduled=False/Unschedulable`` and a ``FailedScheduling`` event.

A pod whose ``spec.schedulerName`` is not ``default-scheduler`` is left alone: it stays Pending
until its own scheduler POSTs a Binding (``pods/{name}/binding``, answered with a ``Success``
Status and code 201 as the apiserver does); then the kubelet admits it like any other pod
(``OutOf<resource>`` when the node lacks room).
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Any

from .api import Api
from .defaults import pod_requests
from .fleet import GPU_RESOURCE
from .objects import TERMINAL, set_condition
from .quantity import QuantityError, format_quantity, parse_quantity
from .resources import NODES, PODS
from .selectors import node_selector_term_matches

Obj = dict[str, Any]
_EVENT_REPEAT_S = 5.0


def tolerates(toleration: Obj, taint: Obj) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(pod: Obj, node: Obj, effects: tuple[str, ...]) -> Obj | None:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in effects:
            continue
        if not any(tolerates(t, taint) for t in tolerations if isinstance(t, dict)):
            return taint
    return None


def matches_node_affinity(pod: Obj, node: Obj) -> bool:
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        return True
    return any(node_selector_term_matches(term, node) for term in terms)


def allocatable(node: Obj) -> dict[str, Fraction]:
    values: dict[str, Fraction] = {}
    for name, raw in ((node.get("status") or {}).get("allocatable") or {}).items():
        try:
            values[name] = parse_quantity(raw)
        except (QuantityError, TypeError):
            continue
    return values


def node_usage(pods: list[Obj], admitted: set[str] | None = None) -> dict[str, Counter[str]]:
    """Requested resources per node over its non-terminated pods (``admitted`` limits the set)."""
    usage: dict[str, Counter[str]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in TERMINAL:
            continue
        if admitted is not None and pod["metadata"].get("uid") not in admitted:
            continue
        bucket = usage.setdefault(node, Counter())
        for name, value in pod_requests(pod).items():
            bucket[name] += value
        bucket["pods"] += 1
    return usage


def insufficient(pod: Obj, node: Obj, used: Counter[str]) -> list[tuple[str, Fraction, Fraction]]:
    """Resources the node lacks for the pod: (name, requested, free)."""
    have = allocatable(node)
    missing: list[tuple[str, Fraction, Fraction]] = []
    wanted = dict(pod_requests(pod))
    wanted["pods"] = Fraction(1)
    for name, amount in wanted.items():
        if amount <= 0:
            continue
        free = have.get(name, Fraction(0)) - used.get(name, Fraction(0))
        if amount > free:
            missing.append((name, amount, free))
    return missing


class Scheduler:
    def __init__(self, api: Api) -> None:
        self.api = api
        self._attempted_at: dict[str, int] = {}  # pod uid -> store rv at the last failed try
        self._last_event: dict[str, tuple[str, float]] = {}

    def reset(self) -> None:
        self._attempted_at.clear()
        self._last_event.clear()

    def tick(self, now: float) -> None:
        store = self.api.store
        pods = store.items(PODS)
        pending = [
            p
            for p in pods
            if not (p.get("spec") or {}).get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase", "Pending") == "Pending"
            and (p.get("spec") or {}).get("schedulerName", "default-scheduler")
            == "default-scheduler"
            and not (p.get("spec") or {}).get("schedulingGates")
        ]
        live = {p["metadata"].get("uid") for p in pods}
        for uid in [u for u in self._attempted_at if u not in live]:
            self._attempted_at.pop(uid, None)
            self._last_event.pop(uid, None)
        if not pending:
            return
        nodes = store.items(NODES)
        usage = node_usage(pods)
        pending.sort(
            key=lambda p: (
                -int((p.get("spec") or {}).get("priority") or 0),
                p["metadata"].get("creationTimestamp", ""),
                int(p["metadata"].get("resourceVersion", "0")),
            )
        )
        for pod in pending:
            uid = pod["metadata"].get("uid", "")
            if self._attempted_at.get(uid) == store.resource_version:
                continue
            chosen, reasons, only_resources = self.place(pod, nodes, usage)
            if chosen is not None:
                self._bind(pod, chosen)
                bucket = usage.setdefault(chosen["metadata"]["name"], Counter())
                for name, value in pod_requests(pod).items():
                    bucket[name] += value
                bucket["pods"] += 1
                self._attempted_at.pop(uid, None)
            else:
                self._unschedulable(pod, self._message(len(nodes), reasons, only_resources), now)
                self._attempted_at[uid] = store.resource_version

    def place(
        self, pod: Obj, nodes: list[Obj], usage: dict[str, Counter[str]]
    ) -> tuple[Obj | None, Counter[str], int]:
        reasons: Counter[str] = Counter()
        feasible: list[Obj] = []
        only_resources = 0
        for node in nodes:
            name = node["metadata"]["name"]
            unschedulable_taint = {
                "key": "node.kubernetes.io/unschedulable",
                "effect": "NoSchedule",
            }
            tolerations = (pod.get("spec") or {}).get("tolerations") or []
            if (node.get("spec") or {}).get("unschedulable") and not any(
                tolerates(t, unschedulable_taint) for t in tolerations
            ):
                reasons["node(s) were unschedulable"] += 1
                continue
            taint = untolerated_taint(pod, node, ("NoSchedule", "NoExecute"))
            if taint is not None:
                reasons[
                    f"node(s) had untolerated taint {{{taint.get('key')}: "
                    f"{taint.get('value', '')}}}"
                ] += 1
                continue
            if not matches_node_affinity(pod, node):
                reasons["node(s) didn't match Pod's node affinity/selector"] += 1
                continue
            missing = insufficient(pod, node, usage.get(name, Counter()))
            if missing:
                only_resources += 1
                for resource, _, _ in missing:
                    reasons[
                        "Too many pods" if resource == "pods" else f"Insufficient {resource}"
                    ] += 1
                continue
            feasible.append(node)
        if not feasible:
            return None, reasons, only_resources
        wants_gpu = pod_requests(pod).get(GPU_RESOURCE, Fraction(0)) > 0

        def score(node: Obj) -> tuple[Fraction, str]:
            name = node["metadata"]["name"]
            have = allocatable(node)
            used = usage.get(name, Counter())
            if wants_gpu:  # bin-pack GPUs: the fullest node that still fits
                free = have.get(GPU_RESOURCE, Fraction(0)) - used.get(GPU_RESOURCE, Fraction(0))
                return free, name
            cpu = have.get("cpu", Fraction(1)) or Fraction(1)
            gpus = have.get(GPU_RESOURCE, Fraction(0))
            # CPU-only pods: prefer nodes without GPUs, then the least allocated CPU
            return (gpus * 1000 + used.get("cpu", Fraction(0)) / cpu), name

        return min(feasible, key=score), reasons, only_resources

    @staticmethod
    def _message(total: int, reasons: Counter[str], only_resources: int) -> str:
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        text = (
            f"0/{total} nodes are available: {parts}."
            if parts
            else (f"0/{total} nodes are available.")
        )
        preemption: list[str] = []
        if only_resources:
            preemption.append(f"{only_resources} No preemption victims found for incoming pod")
        if total - only_resources:
            preemption.append(f"{total - only_resources} Preemption is not helpful for scheduling")
        return f"{text} preemption: 0/{total} nodes are available: {', '.join(preemption)}."

    def _bind(self, pod: Obj, node: Obj) -> None:
        meta = pod["metadata"]
        node_name = node["metadata"]["name"]

        def assign(obj: Obj) -> bool:
            if obj["spec"].get("nodeName") or obj["metadata"].get("deletionTimestamp"):
                return False
            obj["spec"]["nodeName"] = node_name
            set_condition(obj, "PodScheduled", "True")
            return True

        updated = self.api.mutate(PODS, meta["namespace"], meta["name"], assign)
        if updated is not None and updated["spec"].get("nodeName") == node_name:
            self.api.events.record(
                PODS,
                updated,
                "Scheduled",
                f"Successfully assigned {meta['namespace']}/{meta['name']} to {node_name}",
                component="default-scheduler",
            )
            self._last_event.pop(meta.get("uid", ""), None)

    def _unschedulable(self, pod: Obj, message: str, now: float) -> None:
        meta = pod["metadata"]

        def mark(obj: Obj) -> None:
            set_condition(obj, "PodScheduled", "False", "Unschedulable", message)

        updated = self.api.mutate(PODS, meta["namespace"], meta["name"], mark)
        uid = meta.get("uid", "")
        last = self._last_event.get(uid)
        if updated is None or (last and last[0] == message and now - last[1] < _EVENT_REPEAT_S):
            return
        self._last_event[uid] = (message, now)
        self.api.events.record(
            PODS,
            updated,
            "FailedScheduling",
            message,
            type_="Warning",
            component="default-scheduler",
        )


def describe_shortage(
    resource: str, requested: Fraction, used: Fraction, capacity: Fraction
) -> str:
    return (
        f"Pod was rejected: Node didn't have enough resource: {resource}, requested: "
        f"{format_quantity(requested, resource)}, used: {format_quantity(used, resource)}, "
        f"capacity: {format_quantity(capacity, resource)}"
    )
