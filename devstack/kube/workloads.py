"""Emulated Deployment and ReplicaSet controllers of the Kubernetes API emulator (a development
stand-in), driven by the same tick as the other controllers.

* ReplicaSet: keeps ``spec.replicas`` active pods (not terminal, not being deleted) from its
  template, named ``<replicaset>-<suffix>`` and owned by it (``ownerReferences``, so deleting it
  collects them); a deleted or failed pod is replaced, surplus pods go unscheduled first, then
  not ready, then newest. ``status``: replicas, fullyLabeledReplicas, readyReplicas,
  availableReplicas, observedGeneration.
* Deployment: one ReplicaSet per pod-template hash (``<deployment>-<hash>``, the pod's
  ``pod-template-hash`` label), revision annotations, RollingUpdate with ``maxSurge`` /
  ``maxUnavailable`` (defaults 25 %; with maxUnavailable 0 and maxSurge 1 pods are replaced one
  by one, each new one Ready before an old one goes) or Recreate, old ReplicaSets beyond
  ``revisionHistoryLimit`` removed, ``paused`` honoured, and ``status`` with replicas,
  updatedReplicas, readyReplicas, availableReplicas, unavailableReplicas, observedGeneration
  and the Available / Progressing conditions. Zero counts are left out, as the apiserver's
  ``omitempty`` does. A pod counts as available as soon as it is Ready (``minReadySeconds``
  and ``progressDeadlineSeconds`` are not modelled).

The controllers only run when something in the store changed since their last pass, and index
pods by owner once per pass, so an idle or Deployment-free cluster costs nothing.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any

from .api import Api
from .defaults import now_iso, parse_time
from .errors import ApiError
from .objects import TERMINAL
from .resources import DEPLOYMENTS, PODS, REPLICASETS, ResourceType

Obj = dict[str, Any]
POD_TEMPLATE_HASH = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
_HASH_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: Obj) -> str:
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).digest()
    return "".join(_HASH_CHARS[b % len(_HASH_CHARS)] for b in digest[:10])


def resolve(value: Any, total: int, round_up: bool) -> int:
    """An IntOrString (``1``, ``"25%"``) against ``total``."""
    text = str(value if value is not None else 0)
    if text.endswith("%"):
        exact = total * int(text[:-1]) / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return max(0, int(text))


def active(pod: Obj) -> bool:
    return (
        not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in TERMINAL
    )


def ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def controller_uid(obj: Obj) -> str:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return str(ref.get("uid", ""))
    return ""


def owner_reference(rt: ResourceType, obj: Obj) -> Obj:
    return {
        "apiVersion": rt.api_version,
        "kind": rt.kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _deletion_rank(pod: Obj) -> tuple[bool, bool, bool, float]:
    """Pods to remove first sort first: unscheduled, not running, not ready, newest."""
    created = parse_time(pod["metadata"].get("creationTimestamp"))
    return (
        bool((pod.get("spec") or {}).get("nodeName")),
        (pod.get("status") or {}).get("phase") == "Running",
        ready(pod),
        -(created.timestamp() if created else 0.0),
    )


def _revision(rs: Obj) -> int:
    value = (rs["metadata"].get("annotations") or {}).get(REVISION, "0")
    return int(value) if str(value).isdigit() else 0


def _set_condition(status: Obj, kind: str, value: str, reason: str, message: str) -> None:
    """A Deployment condition (lastUpdateTime moves on any change, lastTransitionTime on a
    flip of its status)."""
    conditions = status.setdefault("conditions", [])
    stamp = now_iso()
    for condition in conditions:
        if condition.get("type") != kind:
            continue
        if (condition.get("status"), condition.get("reason"), condition.get("message")) != (
            value,
            reason,
            message,
        ):
            if condition.get("status") != value:
                condition["lastTransitionTime"] = stamp
            condition.update(status=value, reason=reason, message=message, lastUpdateTime=stamp)
        return
    conditions.append(
        {
            "type": kind,
            "status": value,
            "lastUpdateTime": stamp,
            "lastTransitionTime": stamp,
            "reason": reason,
            "message": message,
        }
    )


def _counts(status: Obj, **counts: int) -> None:
    for key, value in counts.items():
        if value:
            status[key] = value
        else:
            status.pop(key, None)


class Workloads:
    """The replicaset-controller and deployment-controller."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._seen_rv = -1

    def reset(self) -> None:
        self._seen_rv = -1

    def tick(self, now: float) -> None:
        store = self.api.store
        with store.lock:
            if store.resource_version == self._seen_rv:
                return
            # what this pass writes moves the version on, so the next pass looks again
            self._seen_rv = store.resource_version
            deployments = store.items(DEPLOYMENTS)
            replicasets = store.items(REPLICASETS)
            if not deployments and not replicasets:
                return
            pods: dict[str, list[Obj]] = {}
            for pod in store.items(PODS):
                owner = controller_uid(pod)
                if owner:
                    pods.setdefault(owner, []).append(pod)
            owned: dict[str, list[Obj]] = {}
            for rs in replicasets:
                self._sync_replicaset(rs, pods.get(rs["metadata"]["uid"], []))
                owner = controller_uid(rs)
                if owner:
                    owned.setdefault(owner, []).append(rs)
            for deployment in deployments:
                self._sync_deployment(
                    deployment, owned.get(deployment["metadata"]["uid"], []), pods
                )

    # --- ReplicaSets -------------------------------------------------------------------------

    def _sync_replicaset(self, rs: Obj, pods: list[Obj]) -> None:
        meta = rs["metadata"]
        if meta.get("deletionTimestamp"):
            return
        live = [p for p in pods if active(p)]
        wanted = int((rs.get("spec") or {}).get("replicas", 1))
        if wanted > len(live):
            for _ in range(wanted - len(live)):
                self._create_pod(rs)
        elif wanted < len(live):
            for pod in sorted(live, key=_deletion_rank)[: len(live) - wanted]:
                try:
                    self.api.delete_object(PODS, pod, None, None)
                except ApiError:
                    continue
                self._event(
                    REPLICASETS,
                    rs,
                    "SuccessfulDelete",
                    f"Deleted pod: {pod['metadata']['name']}",
                    "replicaset-controller",
                )
        ready_count = sum(1 for p in live if ready(p))

        def status(obj: Obj) -> None:
            current = obj.setdefault("status", {})
            current["replicas"] = len(live)
            _counts(
                current,
                fullyLabeledReplicas=len(live),
                readyReplicas=ready_count,
                availableReplicas=ready_count,
            )
            current["observedGeneration"] = obj["metadata"].get("generation", 1)

        self.api.mutate(REPLICASETS, meta["namespace"], meta["name"], status)

    def _create_pod(self, rs: Obj) -> None:
        template = copy.deepcopy((rs.get("spec") or {}).get("template") or {})
        tmeta = template.get("metadata") or {}
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{rs['metadata']['name']}-",
                "labels": tmeta.get("labels") or {},
                "ownerReferences": [owner_reference(REPLICASETS, rs)],
            },
            "spec": template.get("spec") or {},
        }
        if tmeta.get("annotations"):
            body["metadata"]["annotations"] = tmeta["annotations"]
        try:
            pod, _ = self.api.create(PODS, rs["metadata"]["namespace"], body)
        except ApiError as exc:
            self._event(
                REPLICASETS,
                rs,
                "FailedCreate",
                f"Error creating: {exc.message}",
                "replicaset-controller",
                "Warning",
            )
            return
        self._event(
            REPLICASETS,
            rs,
            "SuccessfulCreate",
            f"Created pod: {pod['metadata']['name']}",
            "replicaset-controller",
        )

    # --- Deployments -------------------------------------------------------------------------

    def _sync_deployment(self, deployment: Obj, rss: list[Obj], pods: dict[str, list[Obj]]) -> None:
        meta, spec = deployment["metadata"], deployment.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        desired = int(spec.get("replicas", 1))
        wanted_hash = template_hash(spec.get("template") or {})
        new = next(
            (
                rs
                for rs in rss
                if (rs["metadata"].get("labels") or {}).get(POD_TEMPLATE_HASH) == wanted_hash
            ),
            None,
        )
        olds = sorted(
            (rs for rs in rss if rs is not new),
            key=lambda rs: (_revision(rs), rs["metadata"].get("creationTimestamp", "")),
        )
        live = {
            rs["metadata"]["uid"]: [p for p in pods.get(rs["metadata"]["uid"], []) if active(p)]
            for rs in rss
        }
        ready_by = {uid: sum(1 for p in items if ready(p)) for uid, items in live.items()}
        replicas = {rs["metadata"]["uid"]: int(rs["spec"].get("replicas", 0)) for rs in rss}
        strategy = spec.get("strategy") or {}
        recreate = strategy.get("type") == "Recreate"
        rolling = strategy.get("rollingUpdate") or {}
        surge = 0 if recreate else resolve(rolling.get("maxSurge", "25%"), desired, True)
        unavailable = (
            0 if recreate else resolve(rolling.get("maxUnavailable", "25%"), desired, False)
        )
        if not recreate and surge == 0 and unavailable == 0:
            unavailable = 1
        revision = max([_revision(rs) for rs in rss] or [0])
        if not spec.get("paused"):
            if recreate:
                new = self._recreate(deployment, new, olds, replicas, live, desired, revision)
            else:
                new = self._roll(
                    deployment, new, olds, replicas, ready_by, desired, surge, unavailable, revision
                )
            self._clean_up(deployment, olds, replicas, live)
        if new is not None and _revision(new) < revision and olds:
            self._promote(deployment, new, revision + 1)
        self._status(deployment, new, rss, live, ready_by, desired, unavailable)

    def _roll(
        self,
        deployment: Obj,
        new: Obj | None,
        olds: list[Obj],
        replicas: dict[str, int],
        ready_by: dict[str, int],
        desired: int,
        surge: int,
        unavailable: int,
        revision: int,
    ) -> Obj | None:
        total = sum(replicas.values())
        if new is None:
            start = desired if not olds else min(desired, max(0, desired + surge - total))
            return self._create_replicaset(deployment, start, revision + 1)
        uid = new["metadata"]["uid"]
        have = replicas[uid]
        target = have
        if have > desired:
            target = desired
        elif have < desired:
            target = min(desired, have + max(0, desired + surge - total))
        if target != have:
            self._scale(deployment, new, have, target)
            return new
        if not any(replicas[o["metadata"]["uid"]] for o in olds):
            return new
        min_available = desired - unavailable
        new_unavailable = have - ready_by.get(uid, 0)
        room = total - min_available - new_unavailable
        if room <= 0:
            return new
        scaled = dict(replicas)
        for old in olds:  # pods that are not ready go first, at no cost to availability
            if room <= 0:
                break
            old_uid = old["metadata"]["uid"]
            take = min(room, scaled[old_uid] - ready_by.get(old_uid, 0))
            if take > 0:
                scaled[old_uid] -= take
                room -= take
        spare = sum(ready_by.values()) - min_available
        for old in olds:
            old_uid = old["metadata"]["uid"]
            take = min(max(spare, 0), scaled[old_uid])
            scaled[old_uid] -= take
            spare -= take
        for old in olds:
            old_uid = old["metadata"]["uid"]
            if scaled[old_uid] != replicas[old_uid]:
                self._scale(deployment, old, replicas[old_uid], scaled[old_uid])
                replicas[old_uid] = scaled[old_uid]
        return new

    def _recreate(
        self,
        deployment: Obj,
        new: Obj | None,
        olds: list[Obj],
        replicas: dict[str, int],
        live: dict[str, list[Obj]],
        desired: int,
        revision: int,
    ) -> Obj | None:
        waiting = False
        for old in olds:
            uid = old["metadata"]["uid"]
            if replicas[uid]:
                self._scale(deployment, old, replicas[uid], 0)
                replicas[uid] = 0
            waiting = waiting or bool(live.get(uid))
        if waiting:
            return new
        if new is None:
            return self._create_replicaset(deployment, desired, revision + 1)
        have = replicas[new["metadata"]["uid"]]
        if have != desired:
            self._scale(deployment, new, have, desired)
        return new

    def _clean_up(
        self,
        deployment: Obj,
        olds: list[Obj],
        replicas: dict[str, int],
        live: dict[str, list[Obj]],
    ) -> None:
        """Old ReplicaSets scaled to zero beyond ``revisionHistoryLimit`` are deleted."""
        limit = int((deployment.get("spec") or {}).get("revisionHistoryLimit", 10))
        idle = [
            rs
            for rs in olds
            if not replicas[rs["metadata"]["uid"]] and not live.get(rs["metadata"]["uid"])
        ]
        for rs in idle[: max(0, len(idle) - limit)]:
            try:
                self.api.delete_object(REPLICASETS, rs, None, "Background")
            except ApiError:
                continue

    def _create_replicaset(self, deployment: Obj, replicas: int, revision: int) -> Obj | None:
        meta, spec = deployment["metadata"], deployment.get("spec") or {}
        wanted_hash = template_hash(spec.get("template") or {})
        template = copy.deepcopy(spec.get("template") or {})
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), POD_TEMPLATE_HASH: wanted_hash}
        selector = copy.deepcopy(spec.get("selector") or {})
        selector["matchLabels"] = {
            **(selector.get("matchLabels") or {}),
            POD_TEMPLATE_HASH: wanted_hash,
        }
        name = f"{meta['name']}-{wanted_hash}"
        body: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "labels": tmeta["labels"],
                "annotations": {
                    REVISION: str(revision),
                    "deployment.kubernetes.io/desired-replicas": str(spec.get("replicas", 1)),
                },
                "ownerReferences": [owner_reference(DEPLOYMENTS, deployment)],
            },
            "spec": {
                "replicas": replicas,
                "minReadySeconds": int(spec.get("minReadySeconds") or 0),
                "selector": selector,
                "template": template,
            },
        }
        try:
            rs, _ = self.api.create(REPLICASETS, meta["namespace"], body)
        except ApiError as exc:
            self._event(
                DEPLOYMENTS,
                deployment,
                "FailedCreate",
                f"Failed to create new replica set {name!r}: {exc.message}",
                "deployment-controller",
                "Warning",
            )
            return None
        self._event(
            DEPLOYMENTS,
            deployment,
            "ScalingReplicaSet",
            f"Scaled up replica set {name} from 0 to {replicas}",
            "deployment-controller",
        )
        self._annotate_revision(deployment, revision)
        return rs

    def _promote(self, deployment: Obj, rs: Obj, revision: int) -> None:
        """A template rolled back to an older ReplicaSet's: that one becomes the newest
        revision again."""

        def annotate(obj: Obj) -> None:
            obj["metadata"].setdefault("annotations", {})[REVISION] = str(revision)

        meta = rs["metadata"]
        self.api.mutate(REPLICASETS, meta["namespace"], meta["name"], annotate)
        self._annotate_revision(deployment, revision)

    def _annotate_revision(self, deployment: Obj, revision: int) -> None:
        def annotate(obj: Obj) -> None:
            obj["metadata"].setdefault("annotations", {})[REVISION] = str(revision)

        meta = deployment["metadata"]
        self.api.mutate(DEPLOYMENTS, meta["namespace"], meta["name"], annotate)

    def _scale(self, deployment: Obj, rs: Obj, have: int, target: int) -> None:
        def scale(obj: Obj) -> None:
            obj["spec"]["replicas"] = target
            obj["metadata"].setdefault("annotations", {})[
                "deployment.kubernetes.io/desired-replicas"
            ] = str((deployment.get("spec") or {}).get("replicas", 1))

        meta = rs["metadata"]
        self.api.mutate(REPLICASETS, meta["namespace"], meta["name"], scale)
        way = "up" if target > have else "down"
        self._event(
            DEPLOYMENTS,
            deployment,
            "ScalingReplicaSet",
            f"Scaled {way} replica set {meta['name']} from {have} to {target}",
            "deployment-controller",
        )

    def _status(
        self,
        deployment: Obj,
        new: Obj | None,
        rss: list[Obj],
        live: dict[str, list[Obj]],
        ready_by: dict[str, int],
        desired: int,
        unavailable: int,
    ) -> None:
        total = sum(len(items) for items in live.values())
        updated = len(live.get(new["metadata"]["uid"], [])) if new is not None else 0
        ready_count = sum(ready_by.values())
        new_name = new["metadata"]["name"] if new is not None else ""
        complete = updated == desired and total == desired and ready_count >= desired

        def status(obj: Obj) -> None:
            current = obj.setdefault("status", {})
            current["observedGeneration"] = obj["metadata"].get("generation", 1)
            _counts(
                current,
                replicas=total,
                updatedReplicas=updated,
                readyReplicas=ready_count,
                availableReplicas=ready_count,
                unavailableReplicas=max(desired - ready_count, 0),
            )
            if ready_count >= desired - unavailable:
                _set_condition(
                    current,
                    "Available",
                    "True",
                    "MinimumReplicasAvailable",
                    "Deployment has minimum availability.",
                )
            else:
                _set_condition(
                    current,
                    "Available",
                    "False",
                    "MinimumReplicasUnavailable",
                    "Deployment does not have minimum availability.",
                )
            if obj["spec"].get("paused"):
                _set_condition(
                    current, "Progressing", "Unknown", "DeploymentPaused", "Deployment is paused"
                )
            elif complete and new_name:
                _set_condition(
                    current,
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    f'ReplicaSet "{new_name}" has successfully progressed.',
                )
            elif new_name:
                _set_condition(
                    current,
                    "Progressing",
                    "True",
                    "ReplicaSetUpdated",
                    f'ReplicaSet "{new_name}" is progressing.',
                )

        meta = deployment["metadata"]
        self.api.mutate(DEPLOYMENTS, meta["namespace"], meta["name"], status)

    def _event(
        self,
        rt: ResourceType,
        obj: Obj,
        reason: str,
        message: str,
        component: str,
        type_: str = "Normal",
    ) -> None:
        self.api.events.record(rt, obj, reason, message, type_=type_, component=component)
