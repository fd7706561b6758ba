"""The emulated GPU fleet of the Kubernetes API emulator (a development stand-in): node specs,
the default profiles (H100 / A100 / RTX 4090 / CPU-only) and the Node and Lease objects."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .defaults import now_iso
from .images import BANDWIDTH_ANNOTATION, add_image
from .quantity import format_quantity, parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"
# What an RDMA shared-device plugin advertises on nodes with InfiniBand/RoCE NICs: a large
# count, each pod that asks for one gets the node's HCAs (cluster ranks, by node profile).
RDMA_RESOURCE = "rdma/rdma_shared_device_a"
RDMA_SHARED_DEVICES = 1000
DEFAULT_GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
# What a real kubelet keeps back from pods (kube-reserved + system-reserved + the hard eviction
# threshold): allocatable is capacity less these, so an exact fit by capacity is refused.
RESERVED = {"cpu": "2", "memory": "16Gi", "ephemeral-storage": "100Gi"}


def _default_taints() -> list[dict[str, str]]:
    return [dict(DEFAULT_GPU_TAINT)]


@dataclass
class NodeSpec:
    name: str
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    gpu_count: int = 8
    gpu_memory_mb: int = 81559
    cpu: str = "192"
    memory: str = "2048Gi"
    labels: dict[str, str] = field(default_factory=dict)
    # None: ``nvidia.com/gpu=present:NoSchedule`` on GPU nodes, no taints on CPU-only ones
    taints: list[dict[str, str]] | None = None
    instance_type: str = "gpu-8x-h100-80gb"
    interconnect: str = "nvlink"
    pods: int = 110
    ephemeral_storage: str = "3500Gi"
    rdma_devices: int = 0  # RDMA_RESOURCE allocatable (0: no RDMA NIC)
    pull_bandwidth_mbps: float | None = None  # None: the emulator's default
    images: dict[str, int] = field(default_factory=dict)  # held at start: reference -> bytes

    def __post_init__(self) -> None:
        if self.taints is None:
            self.taints = _default_taints() if self.gpu_count else []


@dataclass(frozen=True)
class Profile:
    gpu_product: str
    gpu_count: int
    gpu_memory_mb: int
    cpu: str
    memory: str
    instance_type: str
    interconnect: str
    ephemeral_storage: str = "3500Gi"
    rdma_devices: int = 0


PROFILES: dict[str, Profile] = {
    "h100": Profile(
        "NVIDIA-H100-80GB-HBM3",
        8,
        81559,
        "192",
        "2048Gi",
        "gpu-8x-h100-80gb",
        "nvlink",
        "15Ti",
        RDMA_SHARED_DEVICES,
    ),
    "a100": Profile(
        "NVIDIA-A100-SXM4-80GB",
        8,
        81920,
        "128",
        "1024Gi",
        "gpu-8x-a100-80gb",
        "nvlink",
        "7Ti",
        RDMA_SHARED_DEVICES,
    ),
    "rtx4090": Profile(
        "NVIDIA-GeForce-RTX-4090", 8, 24564, "64", "512Gi", "gpu-8x-rtx4090-24gb", "pcie"
    ),
    "cpu": Profile("", 0, 0, "64", "256Gi", "cpu-64", "none"),
}
# Two CPU-only nodes too: where instances in no-GPU mode run besides GPU nodes' spare CPU.
DEFAULT_FLEET: dict[str, int] = {"h100": 2, "a100": 2, "rtx4090": 2, "cpu": 2}


def parse_fleet(text: str) -> dict[str, int]:
    """``"h100=2,a100=2,rtx4090=2"`` → ``{"h100": 2, "a100": 2, "rtx4090": 2}``."""
    fleet: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        profile, _, count = part.partition("=")
        profile = profile.strip().lower()
        if profile not in PROFILES:
            raise ValueError(f"unknown node profile {profile!r}; known: {', '.join(PROFILES)}")
        try:
            fleet[profile] = int(count) if count else 1
        except ValueError as exc:
            raise ValueError(f"bad node count in {part!r}") from exc
        if fleet[profile] < 0:
            raise ValueError(f"negative node count in {part!r}")
    return fleet


def build_fleet(fleet: dict[str, int] | None = None, name_prefix: str = "") -> list[NodeSpec]:
    """The nodes of a fleet; `name_prefix` sets a second emulated cluster's node names apart
    (the platform's node names are unique across its regions)."""
    specs: list[NodeSpec] = []
    for profile_name, count in (DEFAULT_FLEET if fleet is None else fleet).items():
        profile = PROFILES[profile_name]
        for index in range(count):
            specs.append(
                NodeSpec(
                    name=name_prefix
                    + (f"gpu-{profile_name}-{index}" if profile.gpu_count else f"cpu-{index}"),
                    gpu_product=profile.gpu_product,
                    gpu_count=profile.gpu_count,
                    gpu_memory_mb=profile.gpu_memory_mb,
                    cpu=profile.cpu,
                    memory=profile.memory,
                    instance_type=profile.instance_type,
                    interconnect=profile.interconnect,
                    ephemeral_storage=profile.ephemeral_storage,
                    rdma_devices=profile.rdma_devices,
                    labels=topology_labels(profile_name, index) if profile.gpu_count else {},
                )
            )
    return specs


# The seeded fleet's topology: two nodes a rack, two racks (four nodes) a leaf switch, one RDMA
# fabric per GPU model, as a real fleet's operator labels its nodes for cluster placement.
NODES_PER_RACK, RACKS_PER_SWITCH = 2, 2


def topology_labels(profile_name: str, index: int) -> dict[str, str]:
    rack = index // NODES_PER_RACK
    return {
        "topology.starverse.io/rack": f"{profile_name}-rack-{rack}",
        "topology.starverse.io/switch": f"{profile_name}-leaf-{rack // RACKS_PER_SWITCH}",
        "topology.starverse.io/fabric": f"{profile_name}-ib",
    }


def node_ip(index: int) -> str:
    return f"172.20.{index // 250}.{index % 250 + 2}"


def node_object(spec: NodeSpec, index: int, kubelet_version: str) -> dict[str, Any]:
    digest = hashlib.sha256(spec.name.encode()).hexdigest()
    labels, resources = _labels_and_resources(spec)
    address = node_ip(index)
    now = now_iso()
    node_spec: dict[str, Any] = {
        "podCIDR": f"10.244.{index}.0/24",
        "podCIDRs": [f"10.244.{index}.0/24"],
        "providerID": f"starverse-emulator://{spec.name}",
    }
    if spec.taints:
        node_spec["taints"] = [dict(t) for t in spec.taints]
    annotations = {
        "node.alpha.kubernetes.io/ttl": "0",
        "starverse.io/emulator": "development stand-in, not a real node",
    }
    if spec.pull_bandwidth_mbps:
        annotations[BANDWIDTH_ANNOTATION] = f"{spec.pull_bandwidth_mbps:g}"
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": node_spec,
        "status": {
            "capacity": dict(resources),
            "allocatable": allocatable_of(resources),
            "conditions": _healthy_conditions(now),
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": digest[:32],
                "systemUUID": str(uuid.UUID(digest[32:64])),
                "bootID": str(uuid.uuid4()),
                "kernelVersion": "6.8.0-starverse-emulated",
                "osImage": "Starverse emulated node (development stand-in)",
                "containerRuntimeVersion": "containerd://1.7.0-emulated",
                "kubeletVersion": kubelet_version,
                "kubeProxyVersion": kubelet_version,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [],
        },
    }
    for reference, size_bytes in spec.images.items():
        add_image(node, reference, size_bytes)
    return node


def _labels_and_resources(spec: NodeSpec) -> tuple[dict[str, str], dict[str, str]]:
    """The node's labels and its capacity, with the GPU operator's labels and the GPU resource
    when it has GPUs."""
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": spec.instance_type,
        "starverse.io/interconnect": spec.interconnect,
        "starverse.io/emulated": "true",
    }
    resources = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
        "ephemeral-storage": spec.ephemeral_storage,
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    if spec.gpu_count:
        labels.update(
            {
                "nvidia.com/gpu.product": spec.gpu_product,
                "nvidia.com/gpu.count": str(spec.gpu_count),
                "nvidia.com/gpu.memory": str(spec.gpu_memory_mb),
                "nvidia.com/gpu.present": "true",
            }
        )
        resources[GPU_RESOURCE] = str(spec.gpu_count)
    if spec.rdma_devices:
        resources[RDMA_RESOURCE] = str(spec.rdma_devices)
    labels.update(spec.labels)
    return labels, resources


def allocatable_of(capacity: dict[str, str]) -> dict[str, str]:
    """Capacity less the kubelet's reservations, as a real kubelet reports it."""
    allocatable = dict(capacity)
    for resource, reserved in RESERVED.items():
        if resource in capacity:
            left = max(parse_quantity(capacity[resource]) - parse_quantity(reserved), Fraction(0))
            allocatable[resource] = format_quantity(left, resource)
    return allocatable


def _healthy_conditions(now: str) -> list[dict[str, str]]:
    return [
        _condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            now,
        ),
        _condition(
            "DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure", now
        ),
        _condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            now,
        ),
        _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", now),
    ]


def _condition(kind: str, status: str, reason: str, message: str, now: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def lease_object(node_name: str, node_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node_name,
            "namespace": "kube-node-lease",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
            ],
        },
        "spec": {
            "holderIdentity": node_name,
            "leaseDurationSeconds": 40,
            "renewTime": now_iso()[:-1] + ".000000Z",
        },
    }
