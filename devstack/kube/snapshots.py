"""CSI volume snapshots as the Kubernetes API emulator (a development stand-in) stands in for
the external-snapshotter: the objects' bookkeeping here; the copy of a volume's files that a
snapshot holds, and that a restored claim starts from, is :mod:`.volumedata`'s.

* VolumeSnapshotClass (cluster-scoped): the emulator seeds ``starverse-emulated`` (driver
  ``starverse.io/emulated``, deletionPolicy Delete) as the default class.
* VolumeSnapshot (namespaced) of ``spec.source.persistentVolumeClaimName``: the snapshot
  controller creates its VolumeSnapshotContent (cluster-scoped, ``snapcontent-<uid>``) and
  after ``ready_after_s`` seconds marks both ``readyToUse`` with ``restoreSize`` (the claim's
  capacity) and ``creationTime``; ``status.boundVolumeSnapshotContentName`` names the content.
  A missing or unbound claim, or a missing class, is ``status.error {message, time}`` and the
  snapshot is never ready while that lasts. Deleting a snapshot deletes its content when the
  content's policy is Delete; a claim restored from it keeps its data (as with CSI).
* A PersistentVolumeClaim with ``dataSource`` (or ``dataSourceRef``) ``{apiGroup:
  snapshot.storage.k8s.io, kind: VolumeSnapshot, name}`` stays Pending, with a
  ``ProvisioningFailed`` warning, until that snapshot is ready (and no larger than the claim),
  then binds; it may be ReadOnlyMany.
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction
from typing import Any

from .api import Api, snapshot_source
from .defaults import bind_pvc, now_iso
from .errors import ApiError
from .resources import PVCS, VOLUME_SNAPSHOT_CLASSES, VOLUME_SNAPSHOT_CONTENTS, VOLUME_SNAPSHOTS
from .volumes import requested_storage, storage_of

Obj = dict[str, Any]
DRIVER = "starverse.io/emulated"
DEFAULT_CLASS = "starverse-emulated"
DEFAULT_CLASS_ANNOTATION = "snapshot.storage.kubernetes.io/is-default-class"
SNAPSHOTTER = "snapshot-controller"
PROVISIONER = f"{DRIVER}_external-provisioner"


def default_class_object() -> Obj:
    """The VolumeSnapshotClass the emulator seeds."""
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotClass",
        "metadata": {"name": DEFAULT_CLASS, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
        "driver": DRIVER,
        "deletionPolicy": "Delete",
    }


def quantity_text(size: Fraction) -> str:
    value = int(size)
    for suffix, unit in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)


class Snapshots:
    """The snapshot controller, the CSI snapshotter sidecar and snapshot restores."""

    def __init__(self, api: Api, ready_after_s: float = 0.2) -> None:
        self.api = api
        self.ready_after_s = ready_after_s
        self._started: dict[str, float] = {}  # snapshot uid -> when its content was cut
        self._warned: dict[str, str] = {}  # claim uid -> last ProvisioningFailed message
        self._seen_rv = -1
        self._due: float | None = None

    def reset(self) -> None:
        self._started.clear()
        self._warned.clear()
        self._seen_rv = -1
        self._due = None

    def tick(self, now: float) -> None:
        store = self.api.store
        with store.lock:
            waiting = self._due is not None and now >= self._due
            if store.resource_version == self._seen_rv and not waiting:
                return
            self._seen_rv = store.resource_version
            self._due = None
            snapshots = store.items(VOLUME_SNAPSHOTS)
            for snapshot in snapshots:
                self._sync(snapshot, now)
            live = {s["metadata"]["uid"] for s in snapshots}
            for content in store.items(VOLUME_SNAPSHOT_CONTENTS):
                ref = (content.get("spec") or {}).get("volumeSnapshotRef") or {}
                gone = ref.get("uid") not in live
                if gone and (content.get("spec") or {}).get("deletionPolicy") == "Delete":
                    try:
                        self.api.delete_object(VOLUME_SNAPSHOT_CONTENTS, content, None, None)
                    except ApiError:
                        continue
            for uid in [u for u in self._started if u not in live]:
                del self._started[uid]
            for claim in store.items(PVCS):
                if (claim.get("status") or {}).get("phase") == "Pending" and snapshot_source(claim):
                    self._restore(claim)

    # --- snapshots ---------------------------------------------------------------------------

    def _class(self, snapshot: Obj) -> tuple[Obj | None, str]:
        store = self.api.store
        name = (snapshot.get("spec") or {}).get("volumeSnapshotClassName")
        if name:
            found = store.get(VOLUME_SNAPSHOT_CLASSES, "", name)
            if found is None:
                return None, (
                    "Failed to get snapshot class with error volumesnapshotclasses."
                    f'snapshot.storage.k8s.io "{name}" not found'
                )
            return found, ""
        for candidate in store.items(VOLUME_SNAPSHOT_CLASSES):
            annotations = candidate["metadata"].get("annotations") or {}
            if annotations.get(DEFAULT_CLASS_ANNOTATION) == "true":
                return candidate, ""
        return None, "Failed to get default snapshot class: cannot find default snapshot class"

    def _sync(self, snapshot: Obj, now: float) -> None:
        meta, spec = snapshot["metadata"], snapshot.get("spec") or {}
        status = snapshot.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("readyToUse"):
            return
        namespace, uid = meta["namespace"], meta["uid"]
        claim_name = (spec.get("source") or {}).get("persistentVolumeClaimName")
        content_name = status.get("boundVolumeSnapshotContentName")
        if not content_name:
            claim = self.api.store.get(PVCS, namespace, claim_name or "") if claim_name else None
            snapshot_class, problem = self._class(snapshot)
            if not claim_name:
                problem = "pre-provisioned snapshots are not emulated"
            elif claim is None:
                problem = (
                    "Failed to create snapshot: failed to get input parameters to create "
                    f'snapshot {meta["name"]}: "persistentvolumeclaim \\"{claim_name}\\" not found"'
                )
            elif (claim.get("status") or {}).get("phase") != "Bound":
                problem = (
                    f"Failed to create snapshot: the PVC {claim_name} is not yet bound to a PV, "
                    "will not attempt to take a snapshot"
                )
            if problem or snapshot_class is None or claim is None:
                self._fail(snapshot, problem)
                return
            content_name = self._cut(snapshot, snapshot_class, claim)
            if content_name is None:
                return
            self._started[uid] = now
        started = self._started.setdefault(uid, now)
        due = started + self.ready_after_s
        if now < due:
            self._due = due if self._due is None else min(self._due, due)
            return
        self._ready(snapshot, content_name)

    def _fail(self, snapshot: Obj, message: str) -> None:
        meta = snapshot["metadata"]

        def fail(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            if (status.get("error") or {}).get("message") == message:
                return
            status["readyToUse"] = False
            status["error"] = {"message": message, "time": now_iso()}

        before = (snapshot.get("status") or {}).get("error") or {}
        self.api.mutate(VOLUME_SNAPSHOTS, meta["namespace"], meta["name"], fail)
        if before.get("message") != message:
            self.api.events.record(
                VOLUME_SNAPSHOTS,
                snapshot,
                "SnapshotCreationFailed",
                message,
                type_="Warning",
                component=SNAPSHOTTER,
            )

    def _cut(self, snapshot: Obj, snapshot_class: Obj, claim: Obj) -> str | None:
        """Create the VolumeSnapshotContent and bind the snapshot to it."""
        meta = snapshot["metadata"]
        name = f"snapcontent-{meta['uid']}"
        size = storage_of((claim.get("status") or {}).get("capacity")) or Fraction(0)
        class_name = snapshot_class["metadata"]["name"]
        body: Obj = {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshotContent",
            "metadata": {"name": name},
            "spec": {
                "deletionPolicy": snapshot_class.get("deletionPolicy", "Delete"),
                "driver": snapshot_class.get("driver", DRIVER),
                "source": {"volumeHandle": (claim.get("spec") or {}).get("volumeName", "")},
                "volumeSnapshotClassName": class_name,
                "volumeSnapshotRef": {
                    "apiVersion": "snapshot.storage.k8s.io/v1",
                    "kind": "VolumeSnapshot",
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                },
            },
        }
        try:
            self.api.create(VOLUME_SNAPSHOT_CONTENTS, "", body)
        except ApiError as exc:
            if exc.code != 409:
                self._fail(snapshot, f"Failed to create snapshot content: {exc.message}")
                return None

        def pending(obj: Obj) -> None:
            obj["status"] = {"readyToUse": False, "restoreSize": int(size)}

        self.api.mutate(VOLUME_SNAPSHOT_CONTENTS, "", name, pending)

        def bound(obj: Obj) -> None:
            obj.setdefault("spec", {})["volumeSnapshotClassName"] = class_name
            obj["status"] = {"boundVolumeSnapshotContentName": name, "readyToUse": False}

        self.api.mutate(VOLUME_SNAPSHOTS, meta["namespace"], meta["name"], bound)
        self.api.events.record(
            VOLUME_SNAPSHOTS,
            snapshot,
            "CreatingSnapshot",
            f"Waiting for a snapshot {meta['namespace']}/{meta['name']} to be created by the "
            f"CSI driver.",
            component=SNAPSHOTTER,
        )
        return name

    def _ready(self, snapshot: Obj, content_name: str) -> None:
        meta = snapshot["metadata"]
        content = self.api.store.get(VOLUME_SNAPSHOT_CONTENTS, "", content_name)
        if content is None:
            return
        size = int((content.get("status") or {}).get("restoreSize") or 0)
        moment = dt.datetime.now(dt.UTC)

        def cut(obj: Obj) -> None:
            obj["status"] = {
                "readyToUse": True,
                "restoreSize": size,
                "creationTime": int(moment.timestamp() * 1e9),
                "snapshotHandle": f"snapshot-{meta['uid']}",
            }

        def ready(obj: Obj) -> None:
            obj["status"] = {
                "boundVolumeSnapshotContentName": content_name,
                "creationTime": now_iso(moment),
                "readyToUse": True,
                "restoreSize": quantity_text(Fraction(size)),
            }

        self.api.mutate(VOLUME_SNAPSHOT_CONTENTS, "", content_name, cut)
        updated = self.api.mutate(VOLUME_SNAPSHOTS, meta["namespace"], meta["name"], ready)
        for reason, message in (
            (
                "SnapshotCreated",
                f"Snapshot {meta['namespace']}/{meta['name']} was successfully "
                "created by the CSI driver.",
            ),
            ("SnapshotReady", f"Snapshot {meta['namespace']}/{meta['name']} is ready to use."),
        ):
            self.api.events.record(
                VOLUME_SNAPSHOTS, updated or snapshot, reason, message, component=SNAPSHOTTER
            )

    # --- restores ----------------------------------------------------------------------------

    def _restore(self, claim: Obj) -> None:
        meta = claim["metadata"]
        name = snapshot_source(claim) or ""
        snapshot = self.api.store.get(VOLUME_SNAPSHOTS, meta["namespace"], name)
        prefix = f"error getting handle for DataSource Type VolumeSnapshot by Name {name}"
        status = (snapshot or {}).get("status") or {}
        problem = ""
        if snapshot is None:
            problem = (
                f"{prefix}: error getting snapshot {name} from api server: "
                f'volumesnapshots.snapshot.storage.k8s.io "{name}" not found'
            )
        elif not status.get("readyToUse"):
            problem = f"{prefix}: snapshot {name} is not Ready"
        else:
            size = storage_of({"storage": status.get("restoreSize", "0")}) or Fraction(0)
            wanted = requested_storage(claim) or Fraction(0)
            if wanted < size:
                problem = (
                    f"requested volume size {int(wanted)} is less than the size {int(size)} "
                    f"for the source snapshot {name}"
                )
        storage_class = (claim.get("spec") or {}).get("storageClassName", "")
        if problem:
            message = f'failed to provision volume with StorageClass "{storage_class}": {problem}'
            if self._warned.get(meta["uid"]) != message:
                self._warned[meta["uid"]] = message
                self.api.events.record(
                    PVCS,
                    claim,
                    "ProvisioningFailed",
                    message,
                    type_="Warning",
                    component=PROVISIONER,
                )
            return
        self._warned.pop(meta["uid"], None)
        updated = self.api.mutate(PVCS, meta["namespace"], meta["name"], bind_pvc)
        if updated is not None:
            self.api.events.record(
                PVCS,
                updated,
                "ProvisioningSucceeded",
                f"Successfully provisioned volume {updated['spec'].get('volumeName', '')}",
                component=PROVISIONER,
            )
