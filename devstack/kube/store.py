"""In-memory object store of the Kubernetes API emulator (a development stand-in).

Objects are kept per resource type and never mutated once stored: every change commits a new
dict under the next value of one global resourceVersion counter and appends a ``Change`` to a
bounded history that watches and resourceVersion-based lists read from.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ApiError, expired
from .resources import ResourceType

Obj = dict[str, Any]


@dataclass(frozen=True)
class Change:
    rv: int
    resource: str  # ResourceType.key
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    prev: Obj | None


def obj_key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class Store:
    def __init__(self, history_size: int = 1000) -> None:
        self.lock = threading.RLock()
        self._cond = threading.Condition(self.lock)
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._rv = 0
        self._history: deque[Change] = deque(maxlen=max(1, history_size))
        self._compacted = 0  # newest resourceVersion no longer held in the history
        self.closed = False
        # told each change as it is committed (:mod:`.persistence`'s journal), None: in memory
        self.journal: Callable[[Change], None] | None = None

    def restore(self, objects: dict[str, dict[tuple[str, str], Obj]], rv: int) -> None:
        """Hold ``objects`` (by store key, then namespace and name) at resourceVersion ``rv``
        instead of what it held: the history starts empty there, so a watch or list from an
        older resourceVersion is expired (410 Gone), as after etcd's compaction."""
        with self.lock:
            self._objects = {key: dict(bucket) for key, bucket in objects.items()}
            self._rv = max(rv, self._rv)
            self._history.clear()
            self._compacted = self._rv
            self._cond.notify_all()

    # --- reads (return the stored dicts: callers copy before changing anything) -------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        with self.lock:
            return self._objects.get(rt.key, {}).get((namespace if rt.namespaced else "", name))

    def items(self, rt: ResourceType, namespace: str | None = None) -> list[Obj]:
        with self.lock:
            bucket = self._objects.get(rt.key, {})
            keys = sorted(k for k in bucket if namespace is None or k[0] == namespace)
            return [bucket[k] for k in keys]

    def everything(self) -> dict[tuple[str, str, str], Obj]:
        """Every stored object by ``(resource key, namespace, name)``."""
        with self.lock:
            return {
                (key, *obj_key(obj)): obj
                for key, bucket in self._objects.items()
                for obj in bucket.values()
            }

    def find(self, predicate: Any) -> list[tuple[str, Obj]]:
        """All ``(resource key, object)`` pairs, across types, for which predicate(obj) holds."""
        with self.lock:
            return [
                (key, obj)
                for key, bucket in self._objects.items()
                for obj in bucket.values()
                if predicate(obj)
            ]

    # --- writes ------------------------------------------------------------------------------

    def _commit(self, rt: ResourceType, kind: str, obj: Obj, prev: Obj | None) -> Obj:
        self._rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        bucket = self._objects.setdefault(rt.key, {})
        if kind == "DELETED":
            bucket.pop(obj_key(obj), None)
        else:
            bucket[obj_key(obj)] = obj
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv
        change = Change(self._rv, rt.key, kind, obj, prev)
        self._history.append(change)
        if self.journal is not None:
            self.journal(change)
        self._cond.notify_all()
        return obj

    def add(self, rt: ResourceType, obj: Obj) -> Obj:
        with self.lock:
            return self._commit(rt, "ADDED", obj, None)

    def replace(self, rt: ResourceType, obj: Obj) -> Obj:
        with self.lock:
            prev = self._objects.get(rt.key, {}).get(obj_key(obj))
            return self._commit(rt, "MODIFIED", obj, prev)

    def remove(self, rt: ResourceType, obj: Obj) -> Obj:
        with self.lock:
            prev = self._objects.get(rt.key, {}).get(obj_key(obj))
            final = copy.deepcopy(obj)
            return self._commit(rt, "DELETED", final, prev)

    # --- history -----------------------------------------------------------------------------

    def check_not_expired(self, rv: int) -> None:
        with self.lock:
            if rv < self._compacted:
                raise expired(rv, self._compacted + 1)

    def check_not_future(self, rv: int) -> None:
        with self.lock:
            if rv > self._rv:
                raise ApiError(
                    504,
                    "Timeout",
                    f"Too large resource version: {rv}, current: {self._rv}",
                    {
                        "causes": [
                            {
                                "reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version",
                            }
                        ],
                        "retryAfterSeconds": 1,
                    },
                )

    def changes_after(self, rv: int) -> list[Change]:
        with self.lock:
            self.check_not_expired(rv)
            if rv >= self._rv:
                return []
            # from the newest back: a caller that keeps up reads its few changes, not the
            # whole history, on every pass
            newer: list[Change] = []
            for change in reversed(self._history):
                if change.rv <= rv:
                    break
                newer.append(change)
            newer.reverse()
            return newer

    def wait_for_change(self, rv: int, timeout: float) -> None:
        with self._cond:
            if self._rv <= rv and not self.closed:
                self._cond.wait(timeout)

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()
