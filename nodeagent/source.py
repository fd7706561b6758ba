"""The interface every GPU source implements, and the value types a report is made of.

Three sources implement `GpuSource`: `nvml.NvmlSource` (the real NVML, or a fixture replayed
through the same code), and `sim.SimSource` (a simulation following a Kubernetes cluster). The
agent loop and the reporter only ever see this interface.
"""

from datetime import UTC, datetime
from typing import NamedTuple, Protocol, TypedDict


class DriverInfo(TypedDict):
    driver_version: str | None  # "550.54.15"
    cuda_version: str | None  # "12.4"
    nvml_version: str | None  # "12.550.54.15"


class GpuInfo(TypedDict):
    index: int
    uuid: str
    pci_bus_id: str | None
    product: str
    serial: str | None
    vbios: str | None
    memory_total_mb: int
    nvlink_links: int | None


class GpuMetrics(TypedDict):
    index: int
    uuid: str
    metrics: dict[str, int | float | None]  # every name in metrics.METRIC_NAMES


class LostGpu(TypedDict):
    index: int
    uuid: str | None
    pci_bus_id: str | None
    error: str  # the NVML error name, e.g. "GpuIsLost"


class Event(TypedDict):
    at: str
    type: str  # "xid"
    gpu: int | None
    uuid: str | None
    xid: int | None
    message: str


class Snapshot(TypedDict):
    at: str
    gpus: list[GpuMetrics]
    lost: list[LostGpu]


class PodRef(NamedTuple):
    """The container holding a GPU (the exporter's per-GPU labels, as dcgm-exporter's)."""

    namespace: str
    pod: str
    container: str


class GpuSource(Protocol):
    """What the agent needs from a source. Constructing one opens it (NVML init, …)."""

    def driver(self) -> DriverInfo:
        """Driver, CUDA driver and NVML versions."""
        ...

    def inventory(self) -> list[GpuInfo]:
        """The GPUs that answer, in index order (lost ones are in `sample()["lost"]`)."""
        ...

    def sample(self) -> Snapshot:
        """One sampling instant: metrics of every GPU that answers, and the lost ones."""
        ...

    def events(self) -> list[Event]:
        """Events (XIDs) seen since the previous call, oldest first; drains them."""
        ...

    def close(self) -> None:
        """Stop background threads and release the library."""
        ...


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso_utc(moment: datetime) -> str:
    """`2026-11-29T21:00:15Z`: UTC, whole seconds, `Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
