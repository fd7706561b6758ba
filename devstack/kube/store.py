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


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _owners(obj: Obj | None) -> set[str]:
    """The uids an object's ownerReferences name."""
    if obj is None:
        return set()
    refs = _meta(obj).get("ownerReferences") or []
    return {str(r["uid"]) for r in refs if isinstance(r, dict) and r.get("uid")}


class Store:
    def __init__(self, history_size: int = 1000) -> None:
        self.lock = threading.RLock()
        self._cond = threading.Condition(self.lock)
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        # Indexes kept with every commit, so that a read costs what it returns, not a look at
        # every object (as etcd reads a namespace's prefix, and the garbage collector keeps
        # its graph of owners): store key -> namespace -> name -> object; objects being
        # deleted (a deletionTimestamp) by (store key, namespace, name); owner uid -> its
        # dependents by (store key, namespace, name).
        self._by_namespace: dict[str, dict[str, dict[str, Obj]]] = {}
        self._deleting: dict[tuple[str, str, str], Obj] = {}
        self._owned: dict[str, dict[tuple[str, str, str], Obj]] = {}
        # indexes others add (``add_index``, as client-go's Indexers): name -> (store key,
        # what an object is filed under) and name -> value -> (namespace, name) -> object
        self._indexers: dict[str, tuple[str, Callable[[Obj], list[Any]]]] = {}
        self._indexed: dict[str, dict[Any, dict[tuple[str, str], Obj]]] = {}
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
            self._by_namespace, self._deleting, self._owned = {}, {}, {}
            self._indexed = {name: {} for name in self._indexers}
            for key, bucket in self._objects.items():
                for obj in bucket.values():
                    self._reindex(key, None, obj)
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
        """Objects of a type (in one namespace, or in all), by namespace and name."""
        with self.lock:
            if namespace is None:
                bucket = self._objects.get(rt.key, {})
                return [bucket[k] for k in sorted(bucket)]
            names = self._by_namespace.get(rt.key, {}).get(namespace, {})
            return [names[n] for n in sorted(names)]

    def add_index(self, rt: ResourceType, name: str, values: Callable[[Obj], list[Any]]) -> None:
        """Keep objects of ``rt`` filed under each of ``values(obj)`` (hashable), for
        ``indexed``; the objects stored now are filed at once."""
        with self.lock:
            self._indexers[name] = (rt.key, values)
            self._indexed[name] = {}
            for obj in self._objects.get(rt.key, {}).values():
                self._file(name, None, obj)

    def indexed(self, name: str, value: Any) -> list[Obj]:
        """The objects filed under ``value`` in the index ``name``, by namespace and name."""
        with self.lock:
            found = self._indexed[name].get(value, {})
            return [found[k] for k in sorted(found)]

    def deleting(self) -> list[tuple[str, Obj]]:
        """``(resource key, object)`` of every object with a deletionTimestamp."""
        with self.lock:
            return self._in_bucket_order(list(self._deleting.items()))

    def owned_by(self, uid: str) -> list[tuple[str, Obj]]:
        """``(resource key, object)`` of every object with an ownerReference to ``uid``."""
        with self.lock:
            return self._in_bucket_order(list(self._owned.get(uid, {}).items()))

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
        held = bucket.get(obj_key(obj))
        if kind == "DELETED":
            bucket.pop(obj_key(obj), None)
            self._reindex(rt.key, held, None)
        else:
            bucket[obj_key(obj)] = obj
            self._reindex(rt.key, held, obj)
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv
        change = Change(self._rv, rt.key, kind, obj, prev)
        self._history.append(change)
        if self.journal is not None:
            self.journal(change)
        self._cond.notify_all()
        return obj

    def _reindex(self, key: str, held: Obj | None, obj: Obj | None) -> None:
        """Move the indexes from ``held`` (what the key held, None: nothing) to ``obj`` (None:
        removed). An entry that stays keeps its place, so the indexes list objects in the
        order they first entered them, as the buckets do."""
        namespace, name = obj_key(obj if obj is not None else held or {})
        place = (key, namespace, name)
        names = self._by_namespace.setdefault(key, {}).setdefault(namespace, {})
        if obj is None:
            names.pop(name, None)
            if not names:
                del self._by_namespace[key][namespace]
        else:
            names[name] = obj
        if obj is not None and _meta(obj).get("deletionTimestamp"):
            self._deleting[place] = obj
        else:
            self._deleting.pop(place, None)
        owners = _owners(obj)
        for uid in _owners(held) - owners:
            dependents = self._owned.get(uid)
            if dependents is not None:
                dependents.pop(place, None)
                if not dependents:
                    del self._owned[uid]
        if obj is not None:
            for uid in owners:
                self._owned.setdefault(uid, {})[place] = obj
        for index, (indexed_key, _values) in self._indexers.items():
            if indexed_key == key:
                self._file(index, held, obj)

    def _file(self, name: str, held: Obj | None, obj: Obj | None) -> None:
        values = self._indexers[name][1]
        index = self._indexed[name]
        place = obj_key(obj if obj is not None else held or {})
        new = set(values(obj)) if obj is not None else set()
        for value in set(values(held)) - new if held is not None else ():
            filed = index.get(value)
            if filed is not None:
                filed.pop(place, None)
                if not filed:
                    del index[value]
        if obj is not None:
            for value in new:
                index.setdefault(value, {})[place] = obj

    def _in_bucket_order(
        self, found: list[tuple[tuple[str, str, str], Obj]]
    ) -> list[tuple[str, Obj]]:
        """By resource as the buckets were made, as ``find`` answers (within one resource,
        by when each entered the index)."""
        order = {key: index for index, key in enumerate(self._objects)}
        found.sort(key=lambda item: order.get(item[0][0], len(order)))
        return [(place[0], obj) for place, obj in found]

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
