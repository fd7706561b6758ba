"""The emulated DaemonSet controller of the Kubernetes API emulator (a development stand-in).

One pod of the template on every Ready node the template selects (``nodeSelector``, required
node affinity) and whose NoSchedule/NoExecute taints it tolerates, bound to that node directly
(``spec.nodeName``, as the controller did before it handed binding to the scheduler). A pod of
an older template (the DaemonSet's ``metadata.generation``, in the pod's
``pod-template-generation`` label), on a node no longer selected, or finished is deleted, and
the next pass makes its replacement: a rolling update without the ``maxUnavailable`` pacing.
``status`` counts as the real controller does (desired, current, ready, updated,
misscheduled, available).
"""

from __future__ import annotations

import contextlib
from typing import Any

from .api import Api
from .errors import ApiError
from .objects import TERMINAL
from .resources import DAEMONSETS, NODES, PODS
from .scheduler import matches_node_affinity, untolerated_taint

Obj = dict[str, Any]
GENERATION_LABEL = "pod-template-generation"


def _ready(obj: Obj) -> bool:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


class DaemonSetController:
    def __init__(self, api: Api) -> None:
        self.api = api

    def reset(self) -> None:
        """Nothing to forget: everything it knows is in the store."""

    def tick(self, now: float) -> None:
        store = self.api.store
        daemonsets = store.items(DAEMONSETS)
        if not daemonsets:  # no look at every node and pod on each pass for nothing
            return
        nodes = [n for n in store.items(NODES) if _ready(n)]
        pods_by_owner: dict[str, list[Obj]] = {}
        for pod in store.items(PODS):
            for ref in pod["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "DaemonSet" and ref.get("controller"):
                    pods_by_owner.setdefault(ref.get("uid", ""), []).append(pod)
        for ds in daemonsets:
            if ds["metadata"].get("deletionTimestamp"):
                continue
            self._sync(ds, nodes, pods_by_owner.get(ds["metadata"]["uid"], []))

    def _wanted(self, ds: Obj, nodes: list[Obj]) -> set[str]:
        template = (ds.get("spec") or {}).get("template") or {}
        return {
            node["metadata"]["name"]
            for node in nodes
            if matches_node_affinity(template, node)
            and untolerated_taint(template, node, ("NoSchedule", "NoExecute")) is None
        }

    def _sync(self, ds: Obj, nodes: list[Obj], pods: list[Obj]) -> None:
        meta = ds["metadata"]
        generation = str(meta.get("generation", 1))
        wanted = self._wanted(ds, nodes)
        kept: dict[str, Obj] = {}
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            node = (pod.get("spec") or {}).get("nodeName") or ""
            labels = pod["metadata"].get("labels") or {}
            stale = labels.get(GENERATION_LABEL) != generation
            finished = (pod.get("status") or {}).get("phase") in TERMINAL
            if node not in wanted or stale or finished or node in kept:
                with contextlib.suppress(ApiError):
                    self.api.delete(PODS, meta["namespace"], pod["metadata"]["name"], {})
                continue
            kept[node] = pod
        for node in sorted(wanted - set(kept)):
            self._create_pod(ds, node, generation)
        self._status(ds, wanted, pods, kept, generation)

    def _create_pod(self, ds: Obj, node: str, generation: str) -> None:
        meta = ds["metadata"]
        template = (ds.get("spec") or {}).get("template") or {}
        labels = {**((template.get("metadata") or {}).get("labels") or {})}
        labels[GENERATION_LABEL] = generation
        spec = {**(template.get("spec") or {}), "nodeName": node}
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }
        try:
            self.api.create(PODS, meta["namespace"], body)
        except ApiError as error:  # an invalid template: say so on the DaemonSet, as kube does
            self.api.events.record(
                DAEMONSETS,
                ds,
                "FailedCreate",
                f"Error creating: {error}",
                type_="Warning",
                component="daemonset-controller",
            )
            return
        self.api.events.record(
            DAEMONSETS,
            ds,
            "SuccessfulCreate",
            f"Created pod on node {node}",
            component="daemonset-controller",
        )

    def _status(
        self, ds: Obj, wanted: set[str], pods: list[Obj], kept: dict[str, Obj], generation: str
    ) -> None:
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        on = {(p.get("spec") or {}).get("nodeName") for p in live}
        ready = sum(1 for node, pod in kept.items() if node in wanted and _ready(pod))
        status = {
            "currentNumberScheduled": len(on & wanted),
            "numberMisscheduled": len(on - wanted),
            "desiredNumberScheduled": len(wanted),
            "numberReady": ready,
            "updatedNumberScheduled": len(kept),
            "numberAvailable": ready,
            "observedGeneration": int(generation),
        }
        if len(wanted) - ready:
            status["numberUnavailable"] = len(wanted) - ready

        def write(obj: Obj) -> None:
            obj["status"] = status

        self.api.mutate(DAEMONSETS, ds["metadata"]["namespace"], ds["metadata"]["name"], write)
