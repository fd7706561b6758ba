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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .api import snapshot_source
from .resources import PODS, PVCS, VOLUME_SNAPSHOT_CONTENTS, VOLUME_SNAPSHOTS
from .store import Store

Obj = dict[str, Any]
# Only directories named as the emulator names them are ever removed from the data directory.
_VOLUME_NAME = re.compile(r"^pvc-[0-9a-f-]+$")
_CONTENT_NAME = re.compile(r"^snapcontent-[0-9a-f-]+$")
_POD_UID = re.compile(r"^[0-9a-f-]+$")


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
            self._seen_rv = self.store.resource_version
            self.root.mkdir(parents=True, exist_ok=True)
            self._sync()

    def _sync(self) -> None:
        """Cut new snapshots first (a claim restored from one in the same pass finds it), then
        provision new claims' directories, then remove what lost its object."""
        contents = {c["metadata"]["name"]: c for c in self.store.items(VOLUME_SNAPSHOT_CONTENTS)}
        for name, content in contents.items():
            target = self.content_dir(name)
            if not target.exists():
                handle = ((content.get("spec") or {}).get("source") or {}).get("volumeHandle", "")
                _copy_or_make(self.volume_dir(handle) if handle else None, target)
        claims = self.store.items(PVCS)
        volumes: set[str] = set()
        for claim in claims:
            volume = (claim.get("spec") or {}).get("volumeName") or ""
            if not volume or (claim.get("status") or {}).get("phase") != "Bound":
                continue
            volumes.add(volume)
            target = self.volume_dir(volume)
            if not target.exists():
                _copy_or_make(self._origin(claim), target)
        for child in list(self.root.iterdir()):
            if _VOLUME_NAME.match(child.name) and child.name not in volumes:
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
        path = posixpath.normpath(path)
        volumes = {
            v.get("name"): v
            for v in (pod.get("spec") or {}).get("volumes") or []
            if isinstance(v, dict)
        }
        mounts = sorted(
            (m for m in container.get("volumeMounts") or [] if isinstance(m, dict)),
            key=lambda m: len(posixpath.normpath(str(m.get("mountPath") or "/"))),
            reverse=True,
        )
        for mount in mounts:
            mount_path = posixpath.normpath(str(mount.get("mountPath") or "/"))
            if path != mount_path and not path.startswith(mount_path.rstrip("/") + "/"):
                continue
            base = self._volume_base(pod, volumes.get(mount.get("name")))
            if base is None:
                return None
            inside = posixpath.normpath(
                posixpath.join(str(mount.get("subPath") or ""), path[len(mount_path) :].lstrip("/"))
            )
            if inside.startswith("..") or inside.startswith("/"):
                return None
            return HostPath(base if inside == "." else base / inside, bool(mount.get("readOnly")))
        return None

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


def _copy_or_make(source: Path | None, target: Path) -> None:
    if source is not None and source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        target.mkdir(parents=True, exist_ok=True)
