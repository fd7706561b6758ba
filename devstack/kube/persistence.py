"""The Kubernetes API emulator's objects kept on disk (a development stand-in for etcd), so that
an emulator stopped — even with SIGKILL — and started again with the same ``--state-dir``
serves the objects it had (pods, claims, nodes, ...), under the same resourceVersions, and its
volumes keep their files (the data directory is not emptied when a state was loaded).

Under the state directory:

* ``snapshot.json``: every object and the resourceVersion it was cut at, written whole (to a
  temporary file renamed over the last one) at stop and each ``COMPACT_EVERY`` changes;
* ``journal.jsonl``: each change since the snapshot, one JSON line appended (and flushed to the
  operating system) as it is committed, before the request that made it is answered — a killed
  process loses none; a line cut short by a crash of the machine is the journal's end.

Loaded, the store's history starts empty at the restored resourceVersion: a watch or list from
an older resourceVersion is answered 410 Gone (the client lists again), as after etcd's
compaction. What lived only in the emulator's memory is not kept: the kubelets' view of their
containers (a pod that was running is admitted again and its containers start again, as after
its node's reboot, a simulated trainer resuming from its checkpoint), pods' logs, injected
faults."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import IO, Any

from .store import Change, Obj, Store, obj_key

log = logging.getLogger("devstack.kube")
SNAPSHOT = "snapshot.json"
JOURNAL = "journal.jsonl"
COMPACT_EVERY = 5000


class StateDir:
    """Where one emulator's objects are kept: ``load`` them into a new store, then ``attach``
    it so every change is journaled; ``compact`` writes the snapshot (at stop)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._store: Store | None = None
        self._journal: IO[str] | None = None
        self._since_snapshot = 0

    @property
    def exists(self) -> bool:
        """Whether an earlier emulator left a state here."""
        return (self.path / SNAPSHOT).exists() or (self.path / JOURNAL).exists()

    def load(self) -> tuple[dict[str, dict[tuple[str, str], Obj]], int]:
        """The objects by store key and (namespace, name), and the resourceVersion: the
        snapshot, then each journaled change after it."""
        objects: dict[str, dict[tuple[str, str], Obj]] = {}
        rv = 0
        snapshot = self.path / SNAPSHOT
        if snapshot.exists():
            saved = json.loads(snapshot.read_text())
            rv = int(saved["resourceVersion"])
            for entry in saved["objects"]:
                objects.setdefault(entry["resource"], {})[obj_key(entry["obj"])] = entry["obj"]
        journal = self.path / JOURNAL
        for line in journal.read_text().splitlines() if journal.exists() else []:
            try:
                change = json.loads(line)
            except ValueError:
                log.warning("kube-emulator state journal ends in a cut line path=%s", journal)
                break
            if int(change["rv"]) <= rv:
                continue  # already in the snapshot (cut after these lines were written)
            rv = int(change["rv"])
            bucket = objects.setdefault(change["resource"], {})
            if change["type"] == "DELETED":
                bucket.pop(obj_key(change["obj"]), None)
            else:
                bucket[obj_key(change["obj"])] = change["obj"]
        return objects, rv

    def attach(self, store: Store) -> None:
        """Journal each of the store's changes from now on (the snapshot written first, so the
        journal holds only what follows it)."""
        self._store = store
        self.compact()
        store.journal = self._append

    def _append(self, change: Change) -> None:
        if self._journal is None:
            return
        line = {"rv": change.rv, "resource": change.resource, "type": change.type}
        self._journal.write(json.dumps({**line, "obj": change.obj}, separators=(",", ":")))
        self._journal.write("\n")
        self._journal.flush()
        self._since_snapshot += 1
        if self._since_snapshot >= COMPACT_EVERY:
            self.compact()

    def compact(self) -> None:
        """Write every object as the snapshot, then start an empty journal (a crash between
        the two leaves lines the snapshot already holds: ``load`` skips them)."""
        store = self._store
        if store is None:
            return
        with store.lock:
            saved: dict[str, Any] = {
                "resourceVersion": store.resource_version,
                "objects": [
                    {"resource": key[0], "obj": obj} for key, obj in store.everything().items()
                ],
            }
            temporary = self.path / f"{SNAPSHOT}.tmp"
            temporary.write_text(json.dumps(saved, separators=(",", ":")))
            temporary.replace(self.path / SNAPSHOT)
            if self._journal is not None:
                self._journal.close()
            self._journal = (self.path / JOURNAL).open("w", encoding="utf-8")
            self._since_snapshot = 0

    def close(self) -> None:
        """The last snapshot written; no more journaling."""
        self.compact()
        if self._store is not None:
            self._store.journal = None
        if self._journal is not None:
            self._journal.close()
            self._journal = None
