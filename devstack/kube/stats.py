"""The emulated kubelets' read-only HTTP endpoints as the Kubernetes API emulator (a development
stand-in, not for production) serves them through the apiserver's node proxy,
``/api/v1/nodes/{name}/proxy/{path}``: ``healthz`` and ``stats/summary`` (the Summary API,
volume statistics only).

Nothing is stored on the emulated volumes, so ``usedBytes`` is what
``KubeEmulator.set_volume_usage`` set (0 otherwise) and ``capacityBytes`` the claim's
``status.capacity``. A node whose kubelet is unreachable (``lose_node``) answers what the
apiserver answers when it cannot dial a kubelet: ``503 ServiceUnavailable``,
``error trying to reach service: dial tcp <node IP>:10250: i/o timeout``. A path the kubelet
does not serve answers its plain-text ``404 page not found``.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from typing import Any

from . import errors as err
from .defaults import now_iso
from .resources import NODES, PODS, PVCS
from .store import Store
from .volumes import pod_claims, storage_of

Obj = dict[str, Any]
BYTES_PER_INODE = 16384  # mkfs.ext4's default inode ratio
KUBELET_PORT = 10250
# (HTTP status, body, content type) of a proxied kubelet response
ProxyResponse = tuple[int, bytes, str]


def _internal_ip(node: Obj) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address", ""))
    return ""


def _volume_stats(claim: Obj, volume: str, used: int, stamp: str) -> Obj:
    meta = claim["metadata"]
    capacity = storage_of((claim.get("status") or {}).get("capacity"))
    capacity_bytes = int(capacity) if capacity is not None else 0
    inodes = capacity_bytes // BYTES_PER_INODE
    inodes_used = min(inodes, math.ceil(used / BYTES_PER_INODE))
    return {
        "time": stamp,
        "availableBytes": max(0, capacity_bytes - used),
        "capacityBytes": capacity_bytes,
        "usedBytes": used,
        "inodesFree": inodes - inodes_used,
        "inodes": inodes,
        "inodesUsed": inodes_used,
        "name": volume,
        "pvcRef": {"name": meta.get("name", ""), "namespace": meta.get("namespace", "")},
    }


class NodeProxy:
    """``nodes/{name}/proxy``: the emulated kubelet's answers, and the volume usage they
    report (``set_volume_usage``)."""

    def __init__(self, store: Store, unreachable: Callable[[str], bool]) -> None:
        self.store = store
        self.unreachable = unreachable
        self._usage: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def set_volume_usage(self, namespace: str, claim: str, used_bytes: int) -> None:
        if used_bytes < 0:
            raise ValueError("used_bytes must not be negative")
        with self._lock:
            self._usage[(namespace, claim)] = int(used_bytes)

    def clear_volume_usage(self) -> None:
        with self._lock:
            self._usage.clear()

    def usage(self, namespace: str, claim: str) -> int:
        with self._lock:
            return self._usage.get((namespace, claim), 0)

    def get(self, node_name: str, path: str) -> ProxyResponse:
        """GET ``path`` on a node's kubelet; raises the apiserver's error when it cannot."""
        with self.store.lock:
            node = self.store.get(NODES, "", node_name)
            if node is None:
                raise err.not_found("nodes", "", node_name)
            if self.unreachable(node_name):
                raise err.ApiError(
                    503,
                    "ServiceUnavailable",
                    "error trying to reach service: dial tcp "
                    f"{_internal_ip(node)}:{KUBELET_PORT}: i/o timeout",
                )
            route = path.strip("/")
            if route == "healthz":
                return 200, b"ok", "text/plain; charset=utf-8"
            if route == "stats/summary":
                body = json.dumps(self.summary(node)).encode()
                return 200, body, "application/json"
        return 404, b"404 page not found\n", "text/plain; charset=utf-8"

    def summary(self, node: Obj) -> Obj:
        """The Summary API document: the node and its running pods, with PVC volume stats."""
        name = node["metadata"]["name"]
        stamp = now_iso()
        pods = [
            self._pod_stats(pod, stamp)
            for pod in self.store.items(PODS)
            if (pod.get("spec") or {}).get("nodeName") == name
            and (pod.get("status") or {}).get("phase") == "Running"
        ]
        return {
            "node": {"nodeName": name, "startTime": node["metadata"].get("creationTimestamp")},
            "pods": pods,
        }

    def _pod_stats(self, pod: Obj, stamp: str) -> Obj:
        meta = pod["metadata"]
        namespace = meta.get("namespace", "")
        stats: Obj = {
            "podRef": {"name": meta["name"], "namespace": namespace, "uid": meta.get("uid", "")},
            "startTime": (pod.get("status") or {}).get("startTime"),
        }
        volumes = [
            _volume_stats(
                self.store.get(PVCS, namespace, claim) or _missing(namespace, claim),
                volume,
                self.usage(namespace, claim),
                stamp,
            )
            for volume, claim in pod_claims(pod)
        ]
        if volumes:
            stats["volume"] = volumes
        return stats


def _missing(namespace: str, claim: str) -> Obj:
    """A claim deleted under a running pod: reported with no capacity."""
    return {"metadata": {"name": claim, "namespace": namespace}}
