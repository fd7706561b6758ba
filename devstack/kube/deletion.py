"""DELETE semantics of the Kubernetes API emulator (a development stand-in): preconditions,
graceful pod deletion, finalizers, propagation policies (Background, Foreground, Orphan),
ownerReference garbage collection, pvc-protection and protected namespaces."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import errors as err
from .defaults import now_iso
from .objects import TERMINAL, ns_name, strip_type
from .resources import ALL_RESOURCES, NAMESPACES, PODS, PVCS, ResourceType
from .selectors import make_filter
from .store import Obj, Store
from .volumes import PODS_BY_CLAIM

PVC_PROTECTION = "kubernetes.io/pvc-protection"
PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
_BY_KEY = {rt.key: rt for rt in ALL_RESOURCES}


class DeletionMixin:
    """Deletion and garbage collection; mixed into :class:`.api.Api`."""

    store: Store

    if TYPE_CHECKING:

        def get_raw(self, rt: ResourceType, namespace: str, name: str) -> Obj: ...

        def commit_update(self, rt: ResourceType, new: Obj) -> Obj: ...

        def mutate(
            self, rt: ResourceType, namespace: str, name: str, change: Callable[[Obj], Any]
        ) -> Obj | None: ...

    def remove(self, rt: ResourceType, obj: Obj) -> Obj:
        """Final removal of an object, then background garbage collection of its dependents."""
        with self.store.lock:
            removed = self.store.remove(rt, obj)
            self._collect_dependents(removed["metadata"].get("uid", ""))
            return removed

    def dependents(self, uid: str) -> list[tuple[ResourceType, Obj]]:
        return [(_BY_KEY[key], obj) for key, obj in self.store.owned_by(uid) if key in _BY_KEY]

    def _drop_owner(self, uid: str) -> Callable[[Obj], None]:
        def change(obj: Obj) -> None:
            refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                obj["metadata"]["ownerReferences"] = refs
            else:
                obj["metadata"].pop("ownerReferences", None)

        return change

    def _owner_alive(self, ref: Obj, namespace: str) -> bool:
        """Whether the owner still exists; owners of kinds the emulator does not serve are
        assumed alive, as the real garbage collector cannot resolve them either."""
        for rt in ALL_RESOURCES:
            if rt.kind == ref.get("kind") and rt.api_version == ref.get("apiVersion", "v1"):
                live = self.store.get(rt, namespace if rt.namespaced else "", ref.get("name", ""))
                return live is not None and live["metadata"].get("uid") == ref.get("uid")
        return True

    def _collect_dependents(self, uid: str) -> None:
        for rt, dep in self.dependents(uid):
            meta = dep["metadata"]
            others = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != uid]
            if any(self._owner_alive(r, meta.get("namespace", "")) for r in others):
                self.mutate(rt, meta.get("namespace", ""), meta["name"], self._drop_owner(uid))
            elif not meta.get("deletionTimestamp"):
                self.delete_object(rt, dep, None, "Background")

    def claim_in_use(self, pvc: Obj) -> bool:
        """Whether a pod that has not terminated mounts this claim."""
        meta = pvc["metadata"]
        return any(
            (pod.get("status") or {}).get("phase") not in TERMINAL
            for pod in self.store.indexed(PODS_BY_CLAIM, (meta.get("namespace", ""), meta["name"]))
        )

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        options: Obj,
        *,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """DELETE one object; returns (object as now stored or as removed, removed?)."""
        with self.store.lock:
            old = self.get_raw(rt, namespace, name)
            pre = options.get("preconditions") or {}
            meta = old["metadata"]
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                raise err.conflict(
                    rt.plural,
                    rt.group,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']}, "
                    f"UID in object meta: {meta.get('uid')}",
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
                raise err.conflict(
                    rt.plural,
                    rt.group,
                    name,
                    "Precondition failed: ResourceVersion in precondition: "
                    f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                    f"{meta.get('resourceVersion')}",
                )
            if rt is NAMESPACES and name in PROTECTED_NAMESPACES:
                raise err.forbidden_error(
                    rt.plural, rt.group, name, "this namespace may not be deleted"
                )
            policy = options.get("propagationPolicy")
            if options.get("orphanDependents") is True and not policy:
                policy = "Orphan"
            if dry_run:
                return copy.deepcopy(old), False
            return self.delete_object(rt, old, options.get("gracePeriodSeconds"), policy)

    def delete_object(
        self, rt: ResourceType, old: Obj, grace: int | None, policy: str | None
    ) -> tuple[Obj, bool]:
        with self.store.lock:
            uid = old["metadata"].get("uid", "")
            if policy == "Orphan":
                for dep_rt, dep in self.dependents(uid):
                    self.mutate(
                        dep_rt,
                        dep["metadata"].get("namespace", ""),
                        dep["metadata"]["name"],
                        self._drop_owner(uid),
                    )
            new = copy.deepcopy(old)
            meta = new["metadata"]
            if rt is NAMESPACES:
                new.setdefault("status", {})["phase"] = "Terminating"
                grace = 0
            elif rt is PODS:
                spec, status = new.get("spec") or {}, new.get("status") or {}
                if grace is None:
                    grace = int(spec.get("terminationGracePeriodSeconds", 30))
                if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
                    grace = 0
            else:
                grace = 0
            grace = max(0, int(grace))
            if policy == "Foreground" and rt is not NAMESPACES:
                finalizers = meta.setdefault("finalizers", [])
                if "foregroundDeletion" not in finalizers:
                    finalizers.append("foregroundDeletion")
            if rt is PVCS and not self.claim_in_use(new):
                # the pvc-protection controller would release an unused claim at once
                meta["finalizers"] = [
                    f for f in meta.get("finalizers") or [] if f != PVC_PROTECTION
                ]
                if not meta["finalizers"]:
                    del meta["finalizers"]
            if meta.get("deletionTimestamp"):
                current = meta.get("deletionGracePeriodSeconds") or 0
                if grace < current:
                    meta["deletionGracePeriodSeconds"] = grace
            else:
                if not meta.get("finalizers") and grace == 0 and rt is not NAMESPACES:
                    return copy.deepcopy(self.remove(rt, old)), True
                moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=grace)
                meta["deletionTimestamp"] = now_iso(moment)
                meta["deletionGracePeriodSeconds"] = grace
            if new == old:
                return copy.deepcopy(old), False
            stored = self.commit_update(rt, new)
            return copy.deepcopy(stored), self.store.get(rt, *ns_name(stored)) is None

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        options: Obj,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        matcher = make_filter(rt.plural, label_selector, field_selector)
        with self.store.lock:
            doomed = [o for o in self.store.items(rt, namespace) if matcher(o)]
            deleted: list[Obj] = []
            for obj in doomed:
                if (
                    not dry_run
                    and rt is NAMESPACES
                    and obj["metadata"]["name"] in (PROTECTED_NAMESPACES)
                ):
                    continue
                result, _ = (
                    (copy.deepcopy(obj), False)
                    if dry_run
                    else self.delete_object(
                        rt, obj, options.get("gracePeriodSeconds"), options.get("propagationPolicy")
                    )
                )
                deleted.append(strip_type(result))
            return {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self.store.resource_version)},
                "items": deleted,
            }
