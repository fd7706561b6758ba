"""Persistent volume claims as the emulated kubelets and storage controllers of the Kubernetes
API emulator (a development stand-in, not for production) see them; the files a volume holds
are :mod:`.volumedata`'s.

* Mount gating: a pod's ``persistentVolumeClaim`` volumes must name a claim that exists in its
  namespace, is not being deleted and is ``Bound`` (otherwise the kubelet reports
  ``FailedMount``), and a claim whose access modes forbid multi-attach (``ReadWriteOnce``,
  ``ReadWriteOncePod``) may be attached to one node at a time (otherwise the attach/detach
  controller reports ``FailedAttachVolume``: ``Multi-Attach error``).
* Expansion: :class:`VolumeResizer` grows ``status.capacity`` to a grown
  ``spec.resources.requests.storage`` in two ticks, through ``FileSystemResizePending``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from .errors import ApiError
from .objects import TERMINAL, set_condition
from .quantity import QuantityError, parse_quantity
from .resources import PODS, PVCS
from .store import Store, obj_key

if TYPE_CHECKING:
    from .api import Api

Obj = dict[str, Any]
MULTI_ATTACH_MODES = ("ReadWriteMany", "ReadOnlyMany")
RESIZE_PENDING = "FileSystemResizePending"
RESIZER = "external-resizer starverse.io/emulated"


@dataclass(frozen=True)
class VolumeBlock:
    """Why a pod's volumes cannot be set up yet, as the event that says so."""

    reason: str  # FailedMount (kubelet) or FailedAttachVolume (attach/detach controller)
    message: str

    @property
    def component(self) -> str:
        return "kubelet" if self.reason == "FailedMount" else "attachdetach-controller"


def pod_claims(pod: Obj) -> list[tuple[str, str]]:
    """``(volume name, claim name)`` for each persistentVolumeClaim volume of a pod."""
    claims: list[tuple[str, str]] = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        source = volume.get("persistentVolumeClaim") if isinstance(volume, dict) else None
        if isinstance(source, dict) and source.get("claimName"):
            claims.append((str(volume.get("name", "")), str(source["claimName"])))
    return claims


# the Store index of pods by the claims they mount, ``(namespace, claim name)`` (``Api`` adds
# it): who holds a claim is a look at its pods, not at every pod of the namespace
PODS_BY_CLAIM = "pods-by-claim"


def claim_keys(pod: Obj) -> list[Any]:
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    return [(namespace, claim) for _, claim in pod_claims(pod)]


def storage_of(values: Obj | None) -> Fraction | None:
    """The ``storage`` quantity of a requests or capacity map, in bytes (None if unusable)."""
    try:
        return parse_quantity((values or {})["storage"])
    except (KeyError, QuantityError, TypeError):
        return None


def requested_storage(claim: Obj) -> Fraction | None:
    """``spec.resources.requests.storage`` of a claim, in bytes."""
    return storage_of(((claim.get("spec") or {}).get("resources") or {}).get("requests"))


def multi_attach_allowed(claim: Obj) -> bool:
    """``IsMultiAttachAllowed``: a volume without access modes, or with RWX / ROX, may be
    attached to several nodes at once."""
    modes = (claim.get("status") or {}).get("accessModes") or (claim.get("spec") or {}).get(
        "accessModes"
    )
    return not modes or any(mode in MULTI_ATTACH_MODES for mode in modes)


def _claim_problem(claim: Obj | None, namespace: str, name: str) -> str:
    if claim is None:
        return f'persistentvolumeclaim "{name}" not found'
    if claim["metadata"].get("deletionTimestamp"):
        return (
            f"error processing PVC {namespace}/{name}: can't start pod because PVC "
            f"{namespace}/{name} is being deleted"
        )
    if (claim.get("status") or {}).get("phase") != "Bound":
        return f"error processing PVC {namespace}/{name}: PVC is not bound"
    return ""


def mount_block(store: Store, pod: Obj) -> VolumeBlock | None:
    """``FailedMount`` for claims that are missing, being deleted or not bound."""
    namespace = pod["metadata"].get("namespace", "")
    unmounted: list[str] = []
    problems: list[str] = []
    for volume, name in pod_claims(pod):
        problem = _claim_problem(store.get(PVCS, namespace, name), namespace, name)
        if problem:
            unmounted.append(volume)
            problems.append(problem)
    if not problems:
        return None
    return VolumeBlock(
        "FailedMount",
        f"Unable to attach or mount volumes: unmounted volumes=[{' '.join(sorted(unmounted))}], "
        f"unattached volumes=[]: {'; '.join(problems)}",
    )


def attach_block(
    store: Store, pod: Obj, node_name: str, attached: Callable[[Obj], bool]
) -> VolumeBlock | None:
    """``Multi-Attach error`` when a single-node claim is attached to another node: used by a
    pod there that is not terminal and for which ``attached(pod)`` holds."""
    meta = pod["metadata"]
    namespace = meta.get("namespace", "")
    for _, name in pod_claims(pod):
        claim = store.get(PVCS, namespace, name)
        if claim is None or multi_attach_allowed(claim):
            continue
        holders = sorted(
            other["metadata"]["name"]
            for other in store.indexed(PODS_BY_CLAIM, (namespace, name))
            if other["metadata"].get("uid") != meta.get("uid")
            and (other.get("spec") or {}).get("nodeName") not in (None, "", node_name)
            and (other.get("status") or {}).get("phase") not in TERMINAL
            and attached(other)
        )
        if holders:
            volume = (claim.get("spec") or {}).get("volumeName") or name
            return VolumeBlock(
                "FailedAttachVolume",
                f'Multi-Attach error for volume "{volume}" Volume is already used by pod(s) '
                f"{', '.join(holders)}",
            )
    return None


class VolumeResizer:
    """The external-resizer and the kubelet's online file-system expansion, in two ticks: a
    claim whose requested storage exceeds its capacity first gets ``allocatedResources``, the
    ``FileSystemResizePending`` condition and ``Resizing`` / ``FileSystemResizeRequired``
    events; on the next tick ``status.capacity`` takes the new size and the condition goes."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._seen_rv = -1  # the store's resourceVersion at the last pass

    def tick(self, now: float) -> None:
        with self.api.store.lock:
            if self.api.store.resource_version == self._seen_rv:
                return
            claims = self._changed_claims()
            self._seen_rv = self.api.store.resource_version  # our own changes: the next pass
            for claim in claims:
                status = claim.get("status") or {}
                wanted, have = requested_storage(claim), storage_of(status.get("capacity"))
                if status.get("phase") != "Bound" or wanted is None or have is None:
                    continue
                if wanted <= have:
                    continue
                if any(c.get("type") == RESIZE_PENDING for c in status.get("conditions") or []):
                    self._finish(claim)
                else:
                    self._expand(claim)

    def _changed_claims(self) -> list[Obj]:
        """The claims changed since the last pass (what a pass does to a claim depends on it
        alone, so one that did not change needs nothing new); every claim at the first pass
        or when the history no longer reaches back."""
        store = self.api.store
        if self._seen_rv >= 0:
            try:
                changes = store.changes_after(self._seen_rv)
            except ApiError:
                changes = None
            if changes is not None:
                keys = {obj_key(c.obj) for c in changes if c.resource == PVCS.key}
                return [claim for key in sorted(keys) if (claim := store.get(PVCS, *key))]
        return store.items(PVCS)

    def _expand(self, claim: Obj) -> None:
        meta = claim["metadata"]
        requested = claim["spec"]["resources"]["requests"]["storage"]

        def expand(obj: Obj) -> None:
            status = obj["status"]
            status["allocatedResources"] = {"storage": requested}
            status["allocatedResourceStatuses"] = {"storage": "NodeResizePending"}
            set_condition(obj, RESIZE_PENDING, "True")

        updated = self.api.mutate(PVCS, meta["namespace"], meta["name"], expand)
        if updated is None:
            return
        volume = claim["spec"].get("volumeName", "")
        self._event(updated, "Resizing", f"External resizer is resizing volume {volume}", RESIZER)
        self._event(
            updated,
            "FileSystemResizeRequired",
            "Require file system resize of volume on node",
            RESIZER,
        )

    def _finish(self, claim: Obj) -> None:
        meta = claim["metadata"]
        allocated = (claim["status"].get("allocatedResources") or {}).get("storage")

        def grow(obj: Obj) -> None:
            status = obj["status"]
            status["capacity"] = {**(status.get("capacity") or {}), "storage": allocated}
            status.pop("allocatedResourceStatuses", None)
            status["conditions"] = [
                c for c in status.get("conditions") or [] if c.get("type") != RESIZE_PENDING
            ]
            if not status["conditions"]:
                del status["conditions"]

        updated = self.api.mutate(PVCS, meta["namespace"], meta["name"], grow)
        if updated is None:
            return
        volume = claim["spec"].get("volumeName", "")
        node = self._node_of(claim)
        self._event(
            updated,
            "FileSystemResizeSuccessful",
            f'MountVolume.NodeExpandVolume succeeded for volume "{volume}"'
            + (f" {node}" if node else ""),
            "kubelet",
            node,
        )

    def _node_of(self, claim: Obj) -> str:
        """The node of a running pod that mounts the claim (its kubelet expands the file
        system), or "" when none does."""
        meta = claim["metadata"]
        for pod in self.api.store.items(PODS, meta.get("namespace", "")):
            if (pod.get("status") or {}).get("phase") == "Running" and any(
                name == meta["name"] for _, name in pod_claims(pod)
            ):
                return str(pod["spec"].get("nodeName") or "")
        return ""

    def _event(self, claim: Obj, reason: str, message: str, component: str, host: str = "") -> None:
        self.api.events.record(PVCS, claim, reason, message, component=component, host=host)
