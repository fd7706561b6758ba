"""A simulated GPU source for development: the same agent, fed by GPUs that follow a cluster.

`SimSource` implements `GpuSource` without NVML. It reads its node from the Kubernetes API with
urllib (no client package):

    GET {kube_url}/api/v1/nodes/{node}
        labels nvidia.com/gpu.product (e.g. NVIDIA-H100-80GB-HBM3), nvidia.com/gpu.count,
        nvidia.com/gpu.memory (MiB), and the driver labels of GPU feature discovery
    GET {kube_url}/api/v1/pods?fieldSelector=spec.nodeName={node}
        each sample: the GPUs are busy in order of the Running pods' `nvidia.com/gpu` limits
        (oldest pod first): with one Running pod limited to 2 GPUs, GPUs 0 and 1 are busy; a
        pod annotated `emulator.starverse.io/gpu-load` (0 to 1) works them that hard instead
        (0: an instance nobody uses, for trying idle auto-stop).

A busy GPU shows a realistic load (H100: utilisation 85-100 %, 60-78 GB of 80 GB used,
60-75 °C, 550-700 W of a 700 W limit); an idle one is idle (0 %, about 0.5 GB used, 30-36 °C,
70-90 W). Values follow smooth random walks seeded by the node name, so a node always looks the
same, and a GPU ramps up or down over a few samples when pods come and go. If the API cannot be
reached, the last known state holds (and defaults, 8x H100, until the node was read once).
"""

import hashlib
import json
import logging
import os
import random
import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from nodeagent import metrics as m
from nodeagent.source import (
    DriverInfo,
    Event,
    GpuInfo,
    GpuMetrics,
    PodRef,
    Snapshot,
    iso_utc,
    utc_now,
)

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
LOAD_ANNOTATION = "emulator.starverse.io/gpu-load"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_PRODUCT = "NVIDIA H100 80GB HBM3"
DEFAULT_COUNT = 8

# GPU feature discovery writes the product with dashes for spaces; the NVML names these stand for.
KNOWN_PRODUCTS = {
    "NVIDIA-H100-80GB-HBM3": "NVIDIA H100 80GB HBM3",
    "NVIDIA-H100-PCIe": "NVIDIA H100 PCIe",
    "NVIDIA-H200": "NVIDIA H200",
    "NVIDIA-A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
    "NVIDIA-A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
    "NVIDIA-A100-80GB-PCIe": "NVIDIA A100 80GB PCIe",
    "NVIDIA-L40S": "NVIDIA L40S",
    "NVIDIA-GeForce-RTX-4090": "NVIDIA GeForce RTX 4090",
}
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


@dataclass(frozen=True)
class Profile:
    match: str  # substring of the product name
    memory_mb: int
    power_limit_w: float
    sm_clock_max: int
    mem_clock: int
    nvlink_links: int | None
    hbm: bool  # HBM: memory temperature, fixed memory clock
    ecc: bool
    vbios: str


PROFILES = (
    Profile("H200", 143771, 700.0, 1980, 3201, 18, True, True, "96.00.A5.00.01"),
    Profile("H100", 81559, 700.0, 1980, 2619, 18, True, True, "96.00.89.00.01"),
    Profile("A100", 81920, 400.0, 1410, 1593, 12, True, True, "92.00.45.00.03"),
    Profile("L40S", 46068, 350.0, 2520, 9001, None, False, True, "95.02.66.00.02"),
    Profile("4090", 24564, 450.0, 2520, 10501, None, False, False, "95.02.18.80.87"),
)


def profile_for(product: str) -> Profile:
    for profile in PROFILES:
        if profile.match in product:
            return profile
    return PROFILES[1]


def product_name(label: str) -> str:
    label = label.removesuffix("-SHARED")
    return KNOWN_PRODUCTS.get(label, label.replace("-", " "))


class KubeClient:
    """GET JSON from the Kubernetes API with urllib (bearer token and CA file optional)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        ca_file: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"the Kubernetes API URL must be http(s)://host[:port]: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.timeout = timeout
        handlers: list[Any] = []
        if parsed.scheme == "https":
            handlers.append(
                urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca_file))
            )
        self._opener = urllib.request.build_opener(*handlers)

    @classmethod
    def in_cluster(cls) -> "KubeClient":
        """The API of the cluster this pod runs in (service account token and CA)."""
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        token = (SERVICE_ACCOUNT / "token").read_text().strip()
        return cls(f"https://{host}:{port}", token=token, ca_file=str(SERVICE_ACCOUNT / "ca.crt"))

    def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(url, headers=headers)  # noqa: S310 - http(s) checked
        with self._opener.open(request, timeout=self.timeout) as response:
            return json.loads(response.read())


def gpu_limit(pod: dict[str, Any]) -> int:
    """GPUs a pod is limited to: the sum over its containers of `nvidia.com/gpu` limits."""
    total = 0
    for container in pod.get("spec", {}).get("containers", []) or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        try:
            total += int(str(limits.get(GPU_RESOURCE, 0)))
        except ValueError:
            continue
    return total


def busy_gpus(pods: list[dict[str, Any]]) -> int:
    """GPUs in use by the Running pods."""
    running = [pod for pod in pods if pod.get("status", {}).get("phase") == "Running"]
    return sum(gpu_limit(pod) for pod in running)


def pod_load(pod: dict[str, Any]) -> float:
    """How hard a Running pod works its GPUs, 0 (idle) to 1 (full load, the default): its
    `emulator.starverse.io/gpu-load` annotation, so that a development cluster can show an
    idle instance (`kubectl annotate pod … emulator.starverse.io/gpu-load=0`)."""
    annotations = pod.get("metadata", {}).get("annotations") or {}
    try:
        load = float(annotations.get(LOAD_ANNOTATION, "1"))
    except ValueError:
        return 1.0
    return min(max(load, 0.0), 1.0) if load == load else 1.0  # NaN: the default


def gpu_loads(pods: list[dict[str, Any]]) -> dict[int, float]:
    """GPU index → the load of the Running pod holding it (the same hand-out as
    `pods_by_gpu`); GPUs no pod holds are absent (idle)."""
    loads: dict[int, float] = {}
    for pod in pods:
        if pod.get("status", {}).get("phase") != "Running":
            continue
        load = pod_load(pod)
        for _ in range(gpu_limit(pod)):
            loads[len(loads)] = load
    return loads


def gpu_digest(node: str, index: int) -> str:
    """The stable digest a simulated GPU's UUID and serial come from: the node and the index."""
    return hashlib.sha256(f"{node}/{index}".encode()).hexdigest()


def gpu_uuid(digest: str) -> str:
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def pods_by_gpu(pods: list[dict[str, Any]]) -> dict[int, PodRef]:
    """GPU index → (namespace, pod, first container) of the Running pods, in running order
    (the same hand-out as `busy_gpus`)."""
    owners: dict[int, PodRef] = {}
    for pod in pods:
        if pod.get("status", {}).get("phase") != "Running":
            continue
        meta = pod.get("metadata", {})
        containers = pod.get("spec", {}).get("containers", []) or [{}]
        owner = PodRef(
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            str(containers[0].get("name", "")),
        )
        for _ in range(gpu_limit(pod)):
            owners[len(owners)] = owner
    return owners


def running_order(pod: dict[str, Any]) -> tuple[str, str, str]:
    """The order in which a node's Running pods are handed its GPUs: oldest first."""
    meta = pod.get("metadata", {})
    return (
        str(meta.get("creationTimestamp", "")),
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
    )


@dataclass
class _Gpu:
    info: GpuInfo
    load: float | None = None  # 0 idle .. 1 busy, None before the first sample
    walks: dict[str, float] = field(default_factory=dict)


class SimSource:
    """`GpuSource` simulating the GPUs of `node`, busy as its Running GPU pods say."""

    def __init__(
        self,
        node: str,
        kube: KubeClient,
        *,
        clock: Callable[[], datetime] = utc_now,
        seed: str | None = None,
    ) -> None:
        self.node = node
        self._kube = kube
        self._clock = clock
        self._rng = random.Random(seed if seed is not None else node)
        self._node_read = False
        self._loads: dict[int, float] = {}
        self._pods: dict[int, PodRef] = {}
        self._api_down = False
        self._labels: dict[str, str] = {}
        self._gpus: list[_Gpu] = []
        self._profile = profile_for(DEFAULT_PRODUCT)
        self._product = DEFAULT_PRODUCT
        self._build(DEFAULT_PRODUCT, DEFAULT_COUNT, None)
        self._read_node()

    # -- the cluster --------------------------------------------------------------------------

    def _api(self, what: str, path: str, query: dict[str, str] | None = None) -> Any:
        try:
            data = self._kube.get(path, query)
        except (OSError, ValueError) as exc:
            if not self._api_down:
                log.warning("sim: cannot read %s from %s: %s", what, self._kube.base_url, exc)
            self._api_down = True
            return None
        if self._api_down:
            log.info("sim: the Kubernetes API answers again")
        self._api_down = False
        return data

    def _read_node(self) -> None:
        node = self._api(
            f"node {self.node}", f"/api/v1/nodes/{urllib.parse.quote(self.node, safe='')}"
        )
        if not isinstance(node, dict):
            return
        labels = node.get("metadata", {}).get("labels", {}) or {}
        status = node.get("status", {}) or {}
        product = product_name(labels.get("nvidia.com/gpu.product", "")) or DEFAULT_PRODUCT
        count = _first_int(
            labels.get("nvidia.com/gpu.count"),
            (status.get("capacity") or {}).get(GPU_RESOURCE),
            DEFAULT_COUNT,
        )
        memory = _first_int(labels.get("nvidia.com/gpu.memory"), None)
        self._labels = labels
        self._build(product, count or 0, memory)
        self._node_read = True

    def _build(self, product: str, count: int, memory_mb: int | None) -> None:
        profile = profile_for(product)
        memory = memory_mb or profile.memory_mb
        self._product, self._profile = product, profile
        old = {gpu.info["index"]: gpu for gpu in self._gpus}
        gpus = []
        for index in range(count):
            digest = gpu_digest(self.node, index)
            bus = HGX_BUSES[index] if count <= len(HGX_BUSES) else (index * 0x10 + 0x10) % 0x100
            info = GpuInfo(
                index=index,
                uuid=gpu_uuid(digest),
                pci_bus_id=f"00000000:{bus:02X}:00.0",
                product=product,
                serial=str(int(digest[32:], 16))[:13] if profile.ecc else None,
                vbios=profile.vbios,
                memory_total_mb=memory,
                nvlink_links=profile.nvlink_links,
            )
            previous = old.get(index)
            gpus.append(_Gpu(info, previous.load, previous.walks) if previous else _Gpu(info))
        self._gpus = gpus

    def _read_busy(self) -> None:
        pods = self._api(
            f"the pods of {self.node}",
            "/api/v1/pods",
            {"fieldSelector": f"spec.nodeName={self.node}"},
        )
        if isinstance(pods, dict):
            items = sorted(pods.get("items", []) or [], key=running_order)
            self._loads = gpu_loads(items)
            self._pods = pods_by_gpu(items)

    def gpu_pods(self) -> dict[int, PodRef]:
        """(namespace, pod, container) holding each busy GPU, as the simulation hands them out."""
        return dict(self._pods)

    # -- GpuSource ----------------------------------------------------------------------------

    def driver(self) -> DriverInfo:
        labels = self._labels
        major = _label(
            labels, "nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver.major"
        )
        minor = _label(
            labels, "nvidia.com/cuda.driver-version.minor", "nvidia.com/cuda.driver.minor"
        )
        rev = _label(
            labels, "nvidia.com/cuda.driver-version.revision", "nvidia.com/cuda.driver.rev"
        )
        cuda_major = _label(
            labels, "nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime.major"
        )
        cuda_minor = _label(
            labels, "nvidia.com/cuda.runtime-version.minor", "nvidia.com/cuda.runtime.minor"
        )
        driver = ".".join(part for part in (major, minor, rev) if part) if major else "550.54.15"
        cuda = f"{cuda_major}.{cuda_minor or 0}" if cuda_major else "12.4"
        return DriverInfo(
            driver_version=driver,
            cuda_version=cuda,
            nvml_version=f"{cuda.split('.')[0]}.{driver}",
        )

    def inventory(self) -> list[GpuInfo]:
        return [GpuInfo(**gpu.info) for gpu in self._gpus]

    def sample(self) -> Snapshot:
        if not self._node_read:
            self._read_node()
        self._read_busy()
        at = iso_utc(self._clock())
        gpus = []
        for gpu in self._gpus:
            target = self._loads.get(gpu.info["index"], 0.0)
            if gpu.load is None or abs(target - gpu.load) < 0.05:
                gpu.load = target
            else:
                gpu.load += (target - gpu.load) * 0.5
            gpus.append(
                GpuMetrics(
                    index=gpu.info["index"], uuid=gpu.info["uuid"], metrics=self._values(gpu)
                )
            )
        return Snapshot(at=at, gpus=gpus, lost=[])

    def events(self) -> list[Event]:
        return []

    def close(self) -> None:
        return None

    # -- values -------------------------------------------------------------------------------

    def _walk(self, gpu: _Gpu, name: str) -> float:
        """A position in [0, 1] that moves a little each sample."""
        position = gpu.walks.get(name)
        if position is None:
            position = self._rng.random()
        else:
            position += self._rng.gauss(0.0, 0.12)
            while not 0.0 <= position <= 1.0:
                position = -position if position < 0 else 2.0 - position
        gpu.walks[name] = position
        return position

    def _value(
        self, gpu: _Gpu, name: str, idle: tuple[float, float], busy: tuple[float, float]
    ) -> float:
        position = self._walk(gpu, name)
        load = gpu.load or 0.0
        idle_value = idle[0] + (idle[1] - idle[0]) * position
        busy_value = busy[0] + (busy[1] - busy[0]) * position
        return idle_value + (busy_value - idle_value) * load

    def _values(self, gpu: _Gpu) -> dict[str, int | float | None]:
        p = self._profile
        total = gpu.info["memory_total_mb"]
        limit = p.power_limit_w
        busy = (gpu.load or 0.0) >= 0.5

        def whole(name: str, idle: tuple[float, float], loaded: tuple[float, float]) -> int:
            return round(self._value(gpu, name, idle, loaded))

        used = whole(m.FB_USED, (480, 560), (total * 0.75, total * 0.975))
        ecc = 0 if p.ecc else None
        values: dict[str, int | float | None] = {
            m.GPU_UTIL: whole(m.GPU_UTIL, (0, 0), (85, 100)),
            m.MEM_COPY_UTIL: whole(m.MEM_COPY_UTIL, (0, 0), (25, 60)),
            m.FB_USED: used,
            m.FB_FREE: total - used,
            m.FB_TOTAL: total,
            m.GPU_TEMP: whole(m.GPU_TEMP, (30, 36), (60, 75)),
            m.MEMORY_TEMP: whole(m.MEMORY_TEMP, (32, 40), (66, 84)) if p.hbm else None,
            m.POWER_USAGE: round(
                self._value(
                    gpu, m.POWER_USAGE, (limit * 0.1, limit * 0.1286), (limit * 0.786, limit)
                ),
                3,
            ),
            m.POWER_MGMT_LIMIT: limit,
            m.SM_CLOCK: whole(m.SM_CLOCK, (345, 345), (p.sm_clock_max * 0.886, p.sm_clock_max)),
            m.MEM_CLOCK: p.mem_clock if p.hbm or busy else 405,
            m.ECC_SBE_VOL_TOTAL: ecc,
            m.ECC_DBE_VOL_TOTAL: ecc,
            m.ECC_SBE_AGG_TOTAL: ecc,
            m.ECC_DBE_AGG_TOTAL: ecc,
            m.CORRECTABLE_REMAPPED_ROWS: ecc,
            m.UNCORRECTABLE_REMAPPED_ROWS: ecc,
            m.ROW_REMAP_FAILURE: ecc,
            m.ROW_REMAP_PENDING: ecc,
            m.RETIRED_SBE: None,  # Ampere and later retire no pages (row remapping instead)
            m.RETIRED_DBE: None,
            m.RETIRED_PENDING: None,
            m.NVLINK_ACTIVE_LINKS: p.nvlink_links,
            m.PCIE_TX_THROUGHPUT: whole(m.PCIE_TX_THROUGHPUT, (0, 50), (500, 4000)),
            m.PCIE_RX_THROUGHPUT: whole(m.PCIE_RX_THROUGHPUT, (0, 50), (2000, 14000)),
            m.COMPUTE_PROCESSES: 1 if busy else 0,
            m.XID_ERRORS: 0,
        }
        return {name: values[name] for name in m.METRIC_NAMES}


def _label(labels: dict[str, str], *names: str) -> str | None:
    for name in names:
        if labels.get(name):
            return labels[name]
    return None


def _first_int(*values: Any) -> int | None:
    for value in values:
        try:
            if value is not None:
                return int(str(value))
        except ValueError:
            continue
    return None
