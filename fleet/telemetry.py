"""Validation of node-agent reports (the contract in nodeagent/report.py) and their storage.

Validation is hand-written rather than a nested serializer because it is the fleet's hot path
(128 nodes × 8 GPUs every 15 s); every refusal still names the field that is wrong."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from starverse.core.errors import InvalidInput

MAX_SAMPLES = 240  # a backlog of one hour at 15 s
MAX_GPUS = 16
MAX_EVENTS = 1000
CLOCK_SKEW = timedelta(minutes=5)
# Columns kept per sample, by their dcgm-exporter names.
STORED_METRICS = {
    "util": "DCGM_FI_DEV_GPU_UTIL",
    "mem_util": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "mem_used_mb": "DCGM_FI_DEV_FB_USED",
    "temp_c": "DCGM_FI_DEV_GPU_TEMP",
    "power_w": "DCGM_FI_DEV_POWER_USAGE",
    "sm_clock_mhz": "DCGM_FI_DEV_SM_CLOCK",
    "ecc_dbe": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
}
UNCORRECTABLE_REMAPPED = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
INT32_MAX = 2**31 - 1
# The values a sensor can truly give, inside what each column holds (smallint, integer). A value
# outside is a broken sensor or agent: that one field is refused, the rest of the report kept,
# so one bad reading never costs the node its heartbeat.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    "util": (0, 100),
    "mem_util": (0, 100),
    "mem_used_mb": (0, 16 * 1024 * 1024),
    "temp_c": (-40, 150),
    "power_w": (0, 10_000),
    "sm_clock_mhz": (0, 10_000),
    "ecc_dbe": (0, INT32_MAX),
}
REMAPPED_RANGE: tuple[float, float] = (0, INT32_MAX)


class Refused(TypedDict):
    """A metric refused as out of range (stored as null)."""

    gpu: int
    field: str
    reason: str


class InventoryItem(TypedDict):
    """A GPU as the node lists it: the Gpu row's columns."""

    index: int
    uuid: str
    pci_bus_id: str
    product: str
    memory_mb: int
    serial: str
    vbios: str
    nvlink_links: int | None


class ReportEvent(TypedDict):
    at: datetime
    type: str
    gpu: int | None
    uuid: str
    xid: int | None
    message: str


class LostGpu(TypedDict):
    index: int | None
    uuid: str
    error: str


@dataclass(frozen=True)
class GpuReading:
    index: int
    uuid: str
    values: dict[str, float | int | None]
    uncorrectable: int
    refused: list[Refused] = field(default_factory=list)


@dataclass(frozen=True)
class Report:
    node: str
    agent_version: str
    driver: dict[str, str]
    inventory: list[InventoryItem]
    samples: list[tuple[datetime, list[GpuReading]]]
    events: list[ReportEvent]
    lost_gpus: list[LostGpu]
    # Each metric refused as out of range, once per GPU and field.
    refused: list[Refused] = field(default_factory=list)


def _fail(field: str, message: str) -> InvalidInput:
    return InvalidInput(f"{field}: {message}", code="invalid_report")


# The checks below read parsed JSON, whose values are Any until checked.
def _obj(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(field, "must be an object")
    return value


def _list(value: Any, field: str, limit: int) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(field, "must be a list")
    if len(value) > limit:
        raise _fail(field, f"at most {limit} items")
    return value


def _str(value: Any, field: str, *, max_length: int = 128, optional: bool = False) -> str:
    if value is None and optional:
        return ""
    if not isinstance(value, str) or len(value) > max_length:
        raise _fail(field, f"must be a string of at most {max_length} characters")
    return value


def _int(value: Any, field: str, *, low: int = 0, high: int = 2**31 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(field, f"must be an integer between {low} and {high}")
    return value


def _number(value: Any, field: str) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise _fail(field, "must be a number or null")
    return value


def _out_of_range(value: float | int | None, bounds: tuple[float, float]) -> str:
    """Why the value is refused, or "" when it is within bounds (or null)."""
    low, high = bounds
    if value is None or low <= value <= high:
        return ""
    return f"{value:g} is outside {low:g}..{high:g}"


def _time(value: Any, field: str, now: datetime) -> datetime:
    parsed = parse_datetime(value) if isinstance(value, str) else None
    if parsed is None or parsed.tzinfo is None:
        raise _fail(field, "must be an ISO 8601 time with a time zone")
    if parsed > now + CLOCK_SKEW:
        raise _fail(field, "is in the future; check the node's clock")
    return parsed


def report_parse(payload: Any, *, node_name: str) -> Report:
    """A validated Report, or InvalidInput naming the first wrong field."""
    now = timezone.now()
    body = _obj(payload, "body")
    if body.get("node") not in (None, node_name):
        raise _fail("node", f"does not match the URL's node {node_name!r}")
    driver = _obj(body.get("driver", {}), "driver")
    inventory = [
        _inventory_item(item, f"inventory[{i}]")
        for i, item in enumerate(_list(body.get("inventory", []), "inventory", MAX_GPUS))
    ]
    samples = [
        _sample(sample, f"samples[{s}]", now)
        for s, sample in enumerate(_list(body.get("samples"), "samples", MAX_SAMPLES))
    ]
    events = [
        _event(event, f"events[{e}]", now)
        for e, event in enumerate(_list(body.get("events", []), "events", MAX_EVENTS))
    ]
    lost = [
        _lost_gpu(item, f"lost_gpus[{i}]")
        for i, item in enumerate(_list(body.get("lost_gpus", []), "lost_gpus", MAX_GPUS))
    ]
    refused: dict[tuple[int, str], Refused] = {}
    for _at, readings in samples:
        for reading in readings:
            for item in reading.refused:
                refused.setdefault((item["gpu"], item["field"]), item)
    return Report(
        node=node_name,
        agent_version=_str(body.get("agent_version", ""), "agent_version", max_length=32),
        driver={
            k: _str(driver.get(k), f"driver.{k}", max_length=32, optional=True)
            for k in ("driver_version", "cuda_version", "nvml_version")
        },
        inventory=inventory,
        samples=samples,
        events=events,
        lost_gpus=lost,
        refused=list(refused.values()),
    )


def _inventory_item(value: Any, field: str) -> InventoryItem:
    item = _obj(value, field)
    return {
        "index": _int(item.get("index"), f"{field}.index", high=MAX_GPUS - 1),
        "uuid": _str(item.get("uuid"), f"{field}.uuid", max_length=96),
        "pci_bus_id": _str(item.get("pci_bus_id"), f"{field}.pci_bus_id", optional=True),
        "product": _str(item.get("product"), f"{field}.product", max_length=100),
        "memory_mb": _int(item.get("memory_total_mb"), f"{field}.memory_total_mb"),
        "serial": _str(item.get("serial"), f"{field}.serial", max_length=64, optional=True),
        "vbios": _str(item.get("vbios"), f"{field}.vbios", max_length=64, optional=True),
        "nvlink_links": None
        if item.get("nvlink_links") is None
        else _int(item.get("nvlink_links"), f"{field}.nvlink_links", high=64),
    }


def _sample(value: Any, field: str, now: datetime) -> tuple[datetime, list[GpuReading]]:
    sample = _obj(value, field)
    at = _time(sample.get("at"), f"{field}.at", now)
    readings = [
        _reading(gpu, f"{field}.gpus[{g}]")
        for g, gpu in enumerate(_list(sample.get("gpus"), f"{field}.gpus", MAX_GPUS))
    ]
    return at, readings


# (column, metric name, bounds) of each reading's check, the remapped rows last (column "").
_CHECKS = [
    *((c, n, METRIC_RANGES[c]) for c, n in STORED_METRICS.items()),
    ("", UNCORRECTABLE_REMAPPED, REMAPPED_RANGE),
]
_PLAIN = (int, float)


def _reading(value: Any, field: str) -> GpuReading:
    """One GPU's stored metrics in a sample, with its count of uncorrectable remapped rows.
    A metric out of its range is stored as null and listed in `refused`."""
    gpu = _obj(value, field)
    index = _int(gpu.get("index"), f"{field}.index", high=MAX_GPUS - 1)
    metrics = _obj(gpu.get("metrics"), f"{field}.metrics")
    refused: list[Refused] = []
    values: dict[str, float | int | None] = {}
    for column, name, bounds in _CHECKS:
        value = metrics.get(name)
        # The usual reading (a plain number within range) is taken at once; anything else goes
        # through the full checks below, which name what is wrong. NaN fails the comparison.
        if type(value) in _PLAIN and bounds[0] <= value <= bounds[1]:
            values[column] = value
            continue
        number = _number(value, f"{field}.metrics.{name}")
        reason = _out_of_range(number, bounds)
        if reason:
            refused.append({"gpu": index, "field": name, "reason": reason})
            number = None
        values[column] = number
    remapped = values.pop("")
    return GpuReading(
        index=index,
        uuid=_str(gpu.get("uuid"), f"{field}.uuid", max_length=96),
        values=values,
        uncorrectable=int(remapped or 0),
        refused=refused,
    )


def _event(value: Any, field: str, now: datetime) -> ReportEvent:
    event = _obj(value, field)
    return {
        "at": _time(event.get("at"), f"{field}.at", now),
        "type": _str(event.get("type"), f"{field}.type", max_length=32),
        "gpu": None
        if event.get("gpu") is None
        else _int(event.get("gpu"), f"{field}.gpu", high=MAX_GPUS - 1),
        "uuid": _str(event.get("uuid"), f"{field}.uuid", max_length=96, optional=True),
        "xid": None
        if event.get("xid") is None
        else _int(event.get("xid"), f"{field}.xid", high=10_000),
        "message": _str(event.get("message"), f"{field}.message", max_length=1000, optional=True),
    }


def _lost_gpu(value: Any, field: str) -> LostGpu:
    item = _obj(value, field)
    return {
        "index": None
        if item.get("index") is None
        else _int(item.get("index"), f"{field}.index", high=MAX_GPUS - 1),
        "uuid": _str(item.get("uuid"), f"{field}.uuid", max_length=96, optional=True),
        "error": _str(item.get("error"), f"{field}.error", max_length=64, optional=True),
    }
