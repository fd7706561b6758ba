"""Where the Kubernetes API emulator's volumes keep their files (a development stand-in: a
directory on the emulator's machine plays each volume's disk).

Under the data directory (``--data-dir``, ``var/kube-volumes/`` for ``make run``; a temporary
directory of the emulator's own when none is given):

* ``<pv-name>/`` for each bound claim's volume (``spec.volumeName``, ``pvc-<claim uid>``): it
  outlives the pods that mount it, whichever node they run on, and goes when the claim (and so,
  reclaim policy Delete, its volume) is gone. A claim restored from a VolumeSnapshot starts as a
  copy of the snapshot's files; one cloned from a claim (``dataSource`` kind
  PersistentVolumeClaim) as a copy of that claim's volume at the time the clone was seen.
* ``snapshots/<content-name>/`` for each VolumeSnapshotContent: a copy of its source volume,
  taken when the content is first seen (the snapshot's cut).
* ``pods/<pod uid>/<volume>/`` for a pod's ``emptyDir`` volumes, removed with the pod.
* ``images/<hash>/`` for each image's emulated root filesystem (:mod:`.seeding`).

:meth:`VolumeData.resolve` maps a path inside a pod's container to the host path behind it
through the container's ``volumeMounts`` (``mountPath``, ``subPath``, ``readOnly``), which is
how the kubelet's simulated programs (:mod:`.trainer`) read and write volumes.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .api import snapshot_source
from .errors import ApiError
from .resources import PODS, PVCS, VOLUME_SNAPSHOT_CONTENTS, VOLUME_SNAPSHOTS
from .store import Change, Store, obj_key

Obj = dict[str, Any]
# Only directories named as the emulator names them are ever removed from the data directory.
_VOLUME_NAME = re.compile(r"^pvc-[0-9a-f-]+$")
_CONTENT_NAME = re.compile(r"^snapcontent-[0-9a-f-]+$")
_POD_UID = re.compile(r"^[0-9a-f-]+$")
# Between full looks at every object, each pass handles only what changed since the last
# (its store changes); a full look this often still removes directories made for an object
# after it went (an exec's write racing the pod's deletion), as the kubelet's housekeeping does.
SWEEP_S = 5.0


@dataclass(frozen=True)
class HostPath:
    """A container path's place on the emulator's machine."""

    path: Path
    read_only: bool


class VolumeData:
    """The volumes' directories: created for new claims (copying a snapshot or a claim they
    come from), removed with their claims, snapshot contents and pods on each store change."""

    def __init__(
        self, store: Store, data_dir: str | os.PathLike[str] | None = None, keep: bool = False
    ) -> None:
        self.store = store
        self.owned = data_dir is None  # a temporary directory, removed at ``close``
        self.root = Path(tempfile.mkdtemp(prefix="kube-volumes-") if data_dir is None else data_dir)
        self.root.mkdir(parents=True, exist_ok=True)
        self._seen_rv = -1
        self._swept_at = float("-inf")
        # volume name -> the claims Bound to it (namespace, name): its directory lives while any
        self._holders: dict[str, set[tuple[str, str]]] = {}
        if not keep:  # the store is new: a directory left by an earlier run belongs to no claim
            self.clear()

    def clear(self) -> None:
        """Remove every volume, snapshot, emptyDir and image directory (the store forgot them)."""
        for child in self.root.iterdir() if self.root.is_dir() else []:
            if child.is_dir() and (
                _VOLUME_NAME.match(child.name) or child.name in ("snapshots", "pods", "images")
            ):
                shutil.rmtree(child, ignore_errors=True)
        self._seen_rv = -1

    def close(self) -> None:
        if self.owned:
            shutil.rmtree(self.root, ignore_errors=True)

    def volume_dir(self, volume_name: str) -> Path:
        return self.root / volume_name

    def content_dir(self, content_name: str) -> Path:
        return self.root / "snapshots" / content_name

    def empty_dir(self, pod_uid: str, volume: str) -> Path:
        return self.root / "pods" / pod_uid / volume

    # --- the controller's pass -----------------------------------------------------------------

    def tick(self, now: float) -> None:
        with self.store.lock:
            if self.store.resource_version == self._seen_rv:
                return
            self.root.mkdir(parents=True, exist_ok=True)
            changes = None
            if self._seen_rv >= 0 and now < self._swept_at + SWEEP_S:
                try:
                    changes = self.store.changes_after(self._seen_rv)
                except ApiError:  # the history no longer reaches back: look at everything
                    changes = None
            self._seen_rv = self.store.resource_version
            if changes is None:
                self._sync()
                self._swept_at = now
            else:
                self._apply(changes)

    def _sync(self) -> None:
        """Look at every claim, content and pod: cut new snapshots first (a claim restored
        from one in the same pass finds it), then provision new claims' directories, then
        remove what lost its object (a directory left by an earlier run, or made for a pod or
        claim after it went)."""
        contents = {c["metadata"]["name"]: c for c in self.store.items(VOLUME_SNAPSHOT_CONTENTS)}
        for name, content in contents.items():
            self._content_seen(name, content)
        self._holders = {}
        for claim in self.store.items(PVCS):
            self._claim_changed(claim, None)
        for child in list(self.root.iterdir()):
            if _VOLUME_NAME.match(child.name) and child.name not in self._holders:
                shutil.rmtree(child, ignore_errors=True)
        for parent, live, pattern in (
            (self.root / "snapshots", set(contents), _CONTENT_NAME),
            (
                self.root / "pods",
                {p["metadata"].get("uid", "") for p in self.store.items(PODS)},
                _POD_UID,
            ),
        ):
            for child in list(parent.iterdir()) if parent.is_dir() else []:
                if pattern.match(child.name) and child.name not in live:
                    shutil.rmtree(child, ignore_errors=True)

    def _apply(self, changes: list[Change]) -> None:
        """What ``_sync`` would do, for the objects these changes touched only: a store
        change costs the directories of its own object, not a look at every claim. Contents
        go first, as in ``_sync``."""
        for change in changes:
            if change.resource == VOLUME_SNAPSHOT_CONTENTS.key:
                name = change.obj["metadata"].get("name", "")
                if change.type == "DELETED":
                    if _CONTENT_NAME.match(name):
                        shutil.rmtree(self.content_dir(name), ignore_errors=True)
                else:
                    self._content_seen(name, change.obj)
        for change in changes:
            if change.resource == PVCS.key:
                self._claim_changed(None if change.type == "DELETED" else change.obj, change.prev)
            elif change.resource == PODS.key and change.type == "DELETED":
                uid = change.obj["metadata"].get("uid", "")
                if _POD_UID.match(uid):
                    shutil.rmtree(self.root / "pods" / uid, ignore_errors=True)

    def _content_seen(self, name: str, content: Obj) -> None:
        target = self.content_dir(name)
        if not target.exists():
            handle = ((content.get("spec") or {}).get("source") or {}).get("volumeHandle", "")
            _copy_or_make(self.volume_dir(handle) if handle else None, target)

    def _claim_changed(self, claim: Obj | None, prev: Obj | None) -> None:
        """A claim's volume directory exists while some claim is Bound to it: made (as a
        copy of its origin) when the first is, removed when the last is no more."""
        old, new = _bound_volume(prev), _bound_volume(claim)
        key = obj_key(claim if claim is not None else prev or {})
        if old and old != new:
            holders = self._holders.get(old, set())
            holders.discard(key)
            if not holders:
                self._holders.pop(old, None)
                if _VOLUME_NAME.match(old):
                    shutil.rmtree(self.volume_dir(old), ignore_errors=True)
        if new and claim is not None:
            self._holders.setdefault(new, set()).add(key)
            target = self.volume_dir(new)
            if not target.exists():
                _copy_or_make(self._origin(claim), target)

    def _origin(self, claim: Obj) -> Path | None:
        """The directory a new claim's volume starts as a copy of: its snapshot's content or
        the claim it clones (None: it starts empty)."""
        namespace = claim["metadata"].get("namespace", "")
        snapshot_name = snapshot_source(claim)
        if snapshot_name:
            snapshot = self.store.get(VOLUME_SNAPSHOTS, namespace, snapshot_name) or {}
            content = (snapshot.get("status") or {}).get("boundVolumeSnapshotContentName")
            return self.content_dir(content) if content else None
        spec = claim.get("spec") or {}
        for key in ("dataSourceRef", "dataSource"):
            source = spec.get(key)
            if (
                isinstance(source, dict)
                and source.get("kind") == "PersistentVolumeClaim"
                and not source.get("apiGroup")
                and source.get("name")
            ):
                cloned = self.store.get(PVCS, namespace, str(source["name"])) or {}
                volume = (cloned.get("spec") or {}).get("volumeName")
                return self.volume_dir(volume) if volume else None
        return None

    # --- paths inside containers -----------------------------------------------------------------

    def resolve(self, pod: Obj, container: Obj, path: str) -> HostPath | None:
        """The host path behind ``path`` (absolute, in ``container`` of ``pod``), or None when
        no volume is mounted there (the container's own writable layer). The mount with the
        longest ``mountPath`` wins, as nested mounts shadow their parents; a ``..`` that would
        leave the volume resolves to None."""
        return self.resolver(pod, container)(path)

    def resolver(self, pod: Obj, container: Obj) -> Callable[[str], HostPath | None]:
        """``resolve`` for many paths of one container, its mounts sorted and each volume's
        directory found once (the seeding program resolves two paths for each directory)."""
        volumes = {
            v.get("name"): v
            for v in (pod.get("spec") or {}).get("volumes") or []
            if isinstance(v, dict)
        }
        mounts = sorted(
            (
                (posixpath.normpath(str(m.get("mountPath") or "/")), m)
                for m in container.get("volumeMounts") or []
                if isinstance(m, dict)
            ),
            key=lambda pair: len(pair[0]),
            reverse=True,
        )
        bases: dict[Any, Path | None] = {}

        def resolve(path: str) -> HostPath | None:
            path = posixpath.normpath(path)
            for mount_path, mount in mounts:
                if path != mount_path and not path.startswith(mount_path.rstrip("/") + "/"):
                    continue
                volume = mount.get("name")
                if volume not in bases:
                    bases[volume] = self._volume_base(pod, volumes.get(volume))
                base = bases[volume]
                if base is None:
                    return None
                inside = posixpath.normpath(
                    posixpath.join(
                        str(mount.get("subPath") or ""), path[len(mount_path) :].lstrip("/")
                    )
                )
                if inside.startswith("..") or inside.startswith("/"):
                    return None
                return HostPath(
                    base if inside == "." else base / inside, bool(mount.get("readOnly"))
                )
            return None

        return resolve

    def _volume_base(self, pod: Obj, volume: Obj | None) -> Path | None:
        if volume is None:
            return None
        claim_source = volume.get("persistentVolumeClaim")
        if isinstance(claim_source, dict):
            namespace = pod["metadata"].get("namespace", "")
            claim = self.store.get(PVCS, namespace, str(claim_source.get("claimName", ""))) or {}
            name = (claim.get("spec") or {}).get("volumeName")
            if not name or (claim.get("status") or {}).get("phase") != "Bound":
                return None
            target = self.volume_dir(name)
            target.mkdir(parents=True, exist_ok=True)
            return target
        if "emptyDir" in volume:
            target = self.empty_dir(pod["metadata"].get("uid", ""), str(volume.get("name", "")))
            target.mkdir(parents=True, exist_ok=True)
            return target
        return None


def _bound_volume(claim: Obj | None) -> str:
    """The volume a claim is Bound to, or "" (none yet, or no longer)."""
    if claim is None or (claim.get("status") or {}).get("phase") != "Bound":
        return ""
    return str((claim.get("spec") or {}).get("volumeName") or "")


def _copy_or_make(source: Path | None, target: Path) -> None:
    if source is not None and source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        target.mkdir(parents=True, exist_ok=True)
