"""Emulated kube-controller-manager loops of the Kubernetes API emulator (a development
stand-in): node lifecycle (lost nodes, taint-based eviction), namespace deletion, foreground
garbage collection, PVC protection and orphaned-pod cleanup."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from .api import Api
from .defaults import now_iso
from .errors import ApiError, not_found
from .kubelet import Kubelet
from .objects import TERMINAL, set_condition
from .resources import ALL_RESOURCES, NAMESPACES, NODES, PODS, PVCS

Obj = dict[str, Any]
UNREACHABLE = "node.kubernetes.io/unreachable"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
_NODE_READY = ("KubeletReady", "kubelet is posting ready status")
_NODE_OK = {
    "MemoryPressure": (
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    "Ready": ("True", *_NODE_READY),
}


def _set_node_condition(node: Obj, kind: str, status: str, reason: str, message: str) -> None:
    stamp = now_iso()
    for condition in (node.setdefault("status", {})).setdefault("conditions", []):
        if condition.get("type") == kind:
            if condition.get("status") != status:
                condition["lastTransitionTime"] = stamp
            condition.update(status=status, reason=reason, message=message)
            if status != "Unknown":
                condition["lastHeartbeatTime"] = stamp
            return


class Controllers:
    def __init__(
        self,
        api: Api,
        kubelet: Kubelet,
        eviction_grace_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.kubelet = kubelet
        self.eviction_grace_s = eviction_grace_s
        self.clock = clock  # the emulator's clock: eviction grace counts from a lost node on it
        self.lost: dict[str, float] = {}
        self._orphaned: dict[str, float] = {}
        self._gc_seen_rv = -1  # the store's resourceVersion at _pod_gc's last look

    def reset(self) -> None:
        self.lost.clear()
        self._orphaned.clear()
        self._gc_seen_rv = -1

    # --- node lifecycle ----------------------------------------------------------------------

    def _pods_on(self, node_name: str) -> list[Obj]:
        return [
            p
            for p in self.api.store.items(PODS)
            if (p.get("spec") or {}).get("nodeName") == node_name
            and (p.get("status") or {}).get("phase") not in TERMINAL
        ]

    def lose_node(self, name: str) -> None:
        with self.api.store.lock:
            if self.api.store.get(NODES, "", name) is None:
                raise not_found("nodes", "", name)
            self.kubelet.frozen_nodes.add(name)
            self.lost[name] = self.clock()

            def unreachable(node: Obj) -> None:
                for kind in _NODE_OK:
                    _set_node_condition(
                        node,
                        kind,
                        "Unknown",
                        "NodeStatusUnknown",
                        "Kubelet stopped posting node status.",
                    )
                taints = [
                    t
                    for t in node.setdefault("spec", {}).get("taints") or []
                    if t.get("key") != UNREACHABLE
                ]
                for effect in ("NoSchedule", "NoExecute"):
                    taints.append({"key": UNREACHABLE, "effect": effect, "timeAdded": now_iso()})
                node["spec"]["taints"] = taints

            node = self.api.mutate(NODES, "", name, unreachable)
            if node is not None:
                self.api.events.record(
                    NODES,
                    node,
                    "NodeNotReady",
                    f"Node {name} status is now: NodeNotReady",
                    component="node-controller",
                )
            for pod in self._pods_on(name):
                message = (
                    f"Node {name} which was running pod {pod['metadata']['name']} is unresponsive"
                )

                def not_ready(obj: Obj, message: str = message) -> None:
                    set_condition(obj, "Ready", "False", "NodeLost", message)
                    obj["status"]["reason"] = "NodeLost"
                    obj["status"]["message"] = message

                meta = pod["metadata"]
                updated = self.api.mutate(PODS, meta["namespace"], meta["name"], not_ready)
                if updated is not None:
                    self.api.events.record(
                        PODS,
                        updated,
                        "NodeNotReady",
                        "Node is not ready",
                        type_="Warning",
                        component="node-controller",
                    )

    def restore_node(self, name: str) -> None:
        with self.api.store.lock:
            if self.api.store.get(NODES, "", name) is None:
                raise not_found("nodes", "", name)
            self.kubelet.frozen_nodes.discard(name)
            self.lost.pop(name, None)

            def healthy(node: Obj) -> None:
                for kind, (status, reason, message) in _NODE_OK.items():
                    _set_node_condition(node, kind, status, reason, message)
                taints = [
                    t
                    for t in (node.get("spec") or {}).get("taints") or []
                    if t.get("key") != UNREACHABLE
                ]
                if taints:
                    node["spec"]["taints"] = taints
                else:
                    node.get("spec", {}).pop("taints", None)

            node = self.api.mutate(NODES, "", name, healthy)
            if node is not None:
                self.api.events.record(
                    NODES,
                    node,
                    "NodeReady",
                    f"Node {name} status is now: NodeReady",
                    component="kubelet",
                    host=name,
                )
            for pod in self._pods_on(name):

                def ready(obj: Obj) -> None:
                    status = obj["status"]
                    if status.pop("reason", None) == "NodeLost":
                        status.pop("message", None)
                    running = status.get("phase") == "Running"
                    set_condition(
                        obj,
                        "Ready",
                        "True" if running else "False",
                        "" if running else "ContainersNotReady",
                    )

                meta = pod["metadata"]
                self.api.mutate(PODS, meta["namespace"], meta["name"], ready)

    def _evictions(self, now: float) -> None:
        for name, lost_at in list(self.lost.items()):
            if now - lost_at < self.eviction_grace_s:
                continue
            for pod in self._pods_on(name) + [
                p
                for p in self.api.store.items(PODS)
                if (p.get("spec") or {}).get("nodeName") == name
                and p["metadata"].get("deletionTimestamp")
            ]:
                meta = pod["metadata"]
                if not pod["metadata"].get("deletionTimestamp"):
                    self.api.events.record(
                        PODS,
                        pod,
                        "TaintManagerEviction",
                        f"Marking for deletion Pod {meta['namespace']}/{meta['name']}",
                        component="taint-eviction-controller",
                    )

                    def disrupted(obj: Obj) -> None:
                        set_condition(
                            obj,
                            "DisruptionTarget",
                            "True",
                            "DeletionByTaintManager",
                            "Taint manager: deleting due to NoExecute taint",
                        )

                    self.api.mutate(PODS, meta["namespace"], meta["name"], disrupted)
                self._force_delete(PODS, meta["namespace"], meta["name"])

    # --- other controllers -------------------------------------------------------------------

    def _force_delete(self, rt: Any, namespace: str, name: str) -> None:
        with contextlib.suppress(ApiError):
            self.api.delete(rt, namespace, name, {"gracePeriodSeconds": 0})

    def _pod_gc(self, now: float) -> None:
        """Pods bound to a node that does not exist are deleted after ``eviction_grace_s``.
        With no orphan being counted and no store change since the last look, there is none
        (only a change makes one): the pass does not look at every pod again."""
        if not self._orphaned and self.api.store.resource_version == self._gc_seen_rv:
            return
        self._gc_seen_rv = self.api.store.resource_version
        nodes = {n["metadata"]["name"] for n in self.api.store.items(NODES)}
        orphans: dict[str, float] = {}
        for pod in self.api.store.items(PODS):
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or node in nodes:
                continue
            uid = pod["metadata"].get("uid", "")
            orphans[uid] = self._orphaned.get(uid, now)
            if now - orphans[uid] >= self.eviction_grace_s:
                self._force_delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
        self._orphaned = orphans

    def _namespaces(self) -> None:
        for ns in self.api.store.items(NAMESPACES):
            if not ns["metadata"].get("deletionTimestamp"):
                continue
            name = ns["metadata"]["name"]
            remaining = 0
            for rt in ALL_RESOURCES:
                if not rt.namespaced:
                    continue
                for obj in self.api.store.items(rt, name):
                    remaining += 1
                    if not obj["metadata"].get("deletionTimestamp"):
                        with contextlib.suppress(ApiError):
                            self.api.delete_object(rt, obj, None, "Background")
            if remaining == 0:

                def finalize(obj: Obj) -> None:
                    obj.setdefault("spec", {})["finalizers"] = []

                self.api.mutate(NAMESPACES, "", name, finalize)

    def _foreground_gc(self) -> None:
        def deleting_foreground(obj: Obj) -> bool:
            meta = obj["metadata"]
            return bool(meta.get("deletionTimestamp")) and "foregroundDeletion" in (
                meta.get("finalizers") or []
            )

        by_key = {rt.key: rt for rt in ALL_RESOURCES}
        for key, owner in self.api.store.deleting():
            if not deleting_foreground(owner):
                continue
            rt = by_key.get(key)
            if rt is None:
                continue
            dependents = self.api.dependents(owner["metadata"].get("uid", ""))
            for dep_rt, dep in dependents:
                if not dep["metadata"].get("deletionTimestamp"):
                    self.api.delete_object(dep_rt, dep, None, "Background")
            if not dependents:

                def release(obj: Obj) -> None:
                    obj["metadata"]["finalizers"] = [
                        f
                        for f in obj["metadata"].get("finalizers") or []
                        if f != "foregroundDeletion"
                    ]

                meta = owner["metadata"]
                self.api.mutate(rt, meta.get("namespace", ""), meta["name"], release)

    def _pvc_protection(self) -> None:
        for pvc in self.api.store.items(PVCS):
            meta = pvc["metadata"]
            if not meta.get("deletionTimestamp") or PVC_PROTECTION not in (
                meta.get("finalizers") or []
            ):
                continue
            if not self.api.claim_in_use(pvc):

                def release(obj: Obj) -> None:
                    obj["metadata"]["finalizers"] = [
                        f for f in obj["metadata"].get("finalizers") or [] if f != PVC_PROTECTION
                    ]

                self.api.mutate(PVCS, meta["namespace"], meta["name"], release)

    def tick(self, now: float) -> None:
        with self.api.store.lock:
            self._evictions(now)
            self._pod_gc(now)
            self._namespaces()
            self._foreground_gc()
            self._pvc_protection()
