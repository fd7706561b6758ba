"""core/v1 Events written by the emulated control plane and kubelets of the Kubernetes API
emulator (a development stand-in), aggregated like client-go's recorder (count, lastTimestamp)."""

from __future__ import annotations

import copy
import itertools
import time
import uuid
from typing import Any

from .defaults import now_iso
from .resources import EVENTS, NAMESPACES, ResourceType
from .store import Store

Obj = dict[str, Any]


class EventRecorder:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._index: dict[tuple[str, ...], tuple[str, str]] = {}
        self._serial = itertools.count()

    def forget(self) -> None:
        """Stop aggregating into events recorded so far (the emulator removed them)."""
        with self.store.lock:
            self._index.clear()

    def record(
        self,
        rt: ResourceType,
        obj: Obj,
        reason: str,
        message: str,
        *,
        type_: str = "Normal",
        component: str = "kubelet",
        host: str = "",
        field_path: str = "",
    ) -> None:
        """An Event about `obj` in its namespace (none once that is being deleted); the same
        event again counts up the one recorded before."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        with self.store.lock:
            ns = self.store.get(NAMESPACES, "", namespace)
            if ns is None or ns["metadata"].get("deletionTimestamp"):
                return
            involved = _involved_object(rt, meta, field_path)
            key = (involved["uid"], rt.kind, reason, message, component, host, field_path, type_)
            stamp = now_iso()
            if self._count_again(key, stamp):
                return
            name = f"{meta.get('name', 'unknown')}.{time.time_ns():x}{next(self._serial):02x}"
            event: Obj = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": stamp,
                },
                "involvedObject": involved,
                "reason": reason,
                "message": message,
                "source": {"component": component, **({"host": host} if host else {})},
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
                "type": type_,
                "reportingComponent": component,
                "reportingInstance": host,
            }
            self.store.add(EVENTS, event)
            self._index[key] = (namespace, name)

    def _count_again(self, key: tuple[str, ...], stamp: str) -> bool:
        """Count one more of the event recorded under `key`, if it is still there."""
        if key not in self._index:
            return False
        current = self.store.get(EVENTS, *self._index[key])
        if current is None:
            return False
        updated = copy.deepcopy(current)
        updated["count"] = int(updated.get("count", 1)) + 1
        updated["lastTimestamp"] = stamp
        self.store.replace(EVENTS, updated)
        return True


def _involved_object(rt: ResourceType, meta: Obj, field_path: str) -> Obj:
    # kubelets name node events by node name (kubectl describe node relies on that)
    uid = meta.get("name", "") if rt.plural == "nodes" else meta.get("uid", "")
    involved: Obj = {
        "kind": rt.kind,
        "name": meta.get("name", ""),
        "uid": uid,
        "apiVersion": rt.api_version,
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if meta.get("namespace"):
        involved["namespace"] = meta["namespace"]
    if field_path:
        involved["fieldPath"] = field_path
    return involved
