"""The NVML source: reads every GPU through `pynvml`, the only module of the package importing it.

Every NVML call goes through one wrapper, against a *call layer*: the real `pynvml` module by
default, or any object with the same functions and an `NVMLError` class whose instances carry the
NVML return code in `.value` (`fixture.FixtureNvml` replays a recorded fixture that way, and
`record.RecordingNvml` records one), so fixtures exercise exactly this module's error handling.

What an NVML error means here:
  * a field the GPU does not support (NotSupported; also FunctionNotFound, NoPermission, Unknown)
    is reported as null, never as an error; any other error on a field is also null, logged once;
  * GpuIsLost (a GPU fallen off the bus), GpuNotFound and ResetRequired on any call of a GPU mark
    that GPU lost: it goes to the report's `lost_gpus`, and the other GPUs still report;
  * nvmlInit failing because the driver or libnvidia-ml is missing raises `NvmlUnavailable`
    with one clear message (the CLI prints it and exits with status 2).

XID events come from an NVML event set (nvmlEventSetCreate, nvmlDeviceRegisterEvents with
nvmlEventTypeXidCriticalError, nvmlEventSetWait_v2 with a timeout) watched by a daemon thread
which pushes them into a thread-safe queue, drained by `events()`.
"""

import ctypes
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeagent import metrics as m
from nodeagent.source import (
    DriverInfo,
    Event,
    GpuInfo,
    GpuMetrics,
    LostGpu,
    Snapshot,
    iso_utc,
    utc_now,
)

log = logging.getLogger(__name__)
# pynvml ships no types (pyproject.toml reads it as Any) and a call layer may stand in for it:
# NVML's handles, structs and values are Any in this module.

DRIVER_MISSING = "NVIDIA driver not found: is this a GPU node with the driver installed?"

# NVML return codes (nvml.h, a stable ABI) by the names pynvml gives its exception classes
# (NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost -> "GpuIsLost").
ERROR_NAMES: dict[int, str] = {
    1: "Uninitialized",
    2: "InvalidArgument",
    3: "NotSupported",
    4: "NoPermission",
    5: "AlreadyInitialized",
    6: "NotFound",
    7: "InsufficientSize",
    8: "InsufficientPower",
    9: "DriverNotLoaded",
    10: "Timeout",
    11: "IrqIssue",
    12: "LibraryNotFound",
    13: "FunctionNotFound",
    14: "CorruptedInforom",
    15: "GpuIsLost",
    16: "ResetRequired",
    17: "OperatingSystem",
    18: "LibRmVersionMismatch",
    19: "InUse",
    20: "Memory",
    21: "NoData",
    22: "VgpuEccNotSupported",
    23: "InsufficientResources",
    24: "FreqNotSupported",
    25: "ArgumentVersionMismatch",
    26: "Deprecated",
    27: "NotReady",
    28: "GpuNotFound",
    29: "InvalidState",
    999: "Unknown",
}
ERROR_CODES: dict[str, int] = {name: code for code, name in ERROR_NAMES.items()}

# Errors meaning "this field is not available here": null, silently.
OPTIONAL_ERRORS = frozenset({"NotSupported", "FunctionNotFound", "NoPermission", "Unknown"})
# Errors meaning "this GPU cannot be used": the GPU is reported lost.
LOST_ERRORS = frozenset({"GpuIsLost", "GpuNotFound", "ResetRequired"})
DRIVER_MISSING_ERRORS = frozenset({"LibraryNotFound", "DriverNotLoaded"})
# nvmlDeviceGetNvLinkState past the GPU's last link answers InvalidArgument.
_NVLINK_ABSENT = OPTIONAL_ERRORS | {"InvalidArgument", "NotFound"}

# NVML enum values used here (nvml.h; tests check them against pynvml's constants).
TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
CLOCK_SM = 1  # NVML_CLOCK_SM
CLOCK_MEM = 2  # NVML_CLOCK_MEM
MEMORY_ERROR_TYPE_CORRECTED = 0
MEMORY_ERROR_TYPE_UNCORRECTED = 1
VOLATILE_ECC = 0
AGGREGATE_ECC = 1
PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
PCIE_UTIL_TX_BYTES = 0
PCIE_UTIL_RX_BYTES = 1
FI_DEV_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP
EVENT_TYPE_XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
NVLINK_LINKS = 18  # links probed: 0..17 (H100/H200/B200 have 18, A100 12)
# nvmlFieldValue_t.valueType -> the member of its value union
VALUE_MEMBERS: dict[int, str] = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}

MIB = 1024 * 1024
EVENT_QUEUE_MAX = 1000

XID_DESCRIPTIONS: dict[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    32: "invalid or corrupted push buffer stream",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to previous errors",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping recording failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine (no driver, no library, …); the message says why."""


class _Lost(Exception):
    """Internal: the GPU being read answered with an error meaning it cannot be used."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def load_pynvml() -> Any:
    """The real call layer."""
    import pynvml  # the package's only import of pynvml

    return pynvml


def error_name(exc: BaseException) -> str:
    """`NotSupported`, `GpuIsLost`, … for an NVML error (by its return code)."""
    code = getattr(exc, "value", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return ERROR_NAMES.get(code, f"Error{code}")
    return type(exc).__name__


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # pynvml's __str__ may call into the library
        text = ""
    return text or error_name(exc)


def xid_message(xid: int) -> str:
    description = XID_DESCRIPTIONS.get(xid)
    return f"XID {xid}: {description}" if description else f"XID {xid}"


def cuda_version_text(raw: Any) -> str | None:
    """12040 (nvmlSystemGetCudaDriverVersion) -> "12.4"."""
    if not isinstance(raw, int) or isinstance(raw, bool) or raw <= 0:
        return None
    return f"{raw // 1000}.{raw % 1000 // 10}"


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    value = value.strip("\x00").strip()
    return value or None


def _int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _flag(value: Any) -> int | None:
    return None if value is None else int(bool(value))


def _handle_key(handle: Any) -> int:
    """A stable key for a device handle: its pointer value (ctypes), else the object's id."""
    try:
        address = ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return id(handle)
    return address if address is not None else id(handle)


@dataclass
class _Device:
    index: int
    handle: Any = None
    info: GpuInfo | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    lost: str | None = None  # the error name while the GPU is lost


class NvmlSource:
    """`GpuSource` over NVML. Constructing it initialises NVML (or raises `NvmlUnavailable`).

    lib: the call layer (default: the real pynvml).
    watch_events: watch XID events. threaded_events: in a daemon thread (default), else polled
    (non-blocking) by each `events()` call.
    """

    def __init__(
        self,
        lib: Any = None,
        *,
        watch_events: bool = True,
        threaded_events: bool = True,
        event_timeout_ms: int = 1000,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if lib is None:
            try:
                lib = load_pynvml()
            except ImportError as exc:
                raise NvmlUnavailable(f"pynvml (nvidia-ml-py) is not installed: {exc}") from None
        self._lib = lib
        self._nvml_error: Any = getattr(lib, "NVMLError", ())
        self._mismatch_error: Any = getattr(lib, "NVMLLibraryMismatchError", ())
        self._clock = clock
        self._threaded = threaded_events
        self._event_timeout_ms = event_timeout_ms
        self._warned: set[tuple[Any, ...]] = set()
        self._lock = threading.Lock()
        self._events: queue.Queue[Event] = queue.Queue(maxsize=EVENT_QUEUE_MAX)
        self._dropped_events = 0
        self._event_set: Any = None
        self._xid_registered: set[int] = set()
        self._xid_last: dict[int, int] = {}
        self._handle_index: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._devices: list[_Device] = []

        self._init()
        try:
            self._driver = self._read_driver()
            count, err = self._try("nvmlDeviceGetCount")
            if err is not None:
                raise NvmlUnavailable(f"NVML could not count the GPUs (nvmlDeviceGetCount: {err})")
            self._devices = [_Device(index) for index in range(_int(count) or 0)]
            for device in self._devices:
                try:
                    self._identify(device)
                except _Lost as lost:
                    self._mark_lost(device, lost.error)
            if watch_events:
                self._start_events()
        except BaseException:
            self.close()
            raise

    # -- the call wrapper ---------------------------------------------------------------------

    def _try(self, fn: str, *args: Any) -> tuple[Any, str | None]:
        """(result, None), or (None, NVML error name): NVML errors never escape."""
        try:
            func = getattr(self._lib, fn)
        except AttributeError:
            return None, "FunctionNotFound"
        try:
            return func(*args), None
        except self._nvml_error as exc:
            return None, error_name(exc)
        except self._mismatch_error:  # pynvml: an unversioned function this driver lacks
            return None, "FunctionNotFound"

    def _read(self, index: int, fn: str, *args: Any) -> tuple[Any, str | None]:
        """A field of GPU `index`: like `_try`, but raises `_Lost` for a GPU that is lost, and
        logs (once) errors other than "not available here"."""
        value, err = self._try(fn, *args)
        if err is not None:
            self._check(index, fn, err)
        return value, err

    def _get(self, index: int, fn: str, *args: Any) -> Any:
        return self._read(index, fn, *args)[0]

    def _check(self, index: int, fn: str, err: str) -> None:
        if err in LOST_ERRORS:
            raise _Lost(err)
        if err not in OPTIONAL_ERRORS:
            self._warn_once(
                (index, fn, err), "GPU %d: %s failed (%s); reported as null", index, fn, err
            )

    def _warn_once(self, key: tuple[Any, ...], message: str, *args: Any) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        log.warning(message, *args)

    # -- init and identity --------------------------------------------------------------------

    def _init(self) -> None:
        try:
            self._lib.nvmlInit()
        except OSError as exc:
            raise NvmlUnavailable(f"{DRIVER_MISSING} (nvmlInit: {exc})") from None
        except self._nvml_error as exc:
            detail = _describe(exc)
            if error_name(exc) in DRIVER_MISSING_ERRORS:
                raise NvmlUnavailable(f"{DRIVER_MISSING} (nvmlInit: {detail})") from None
            raise NvmlUnavailable(f"NVML could not be initialised (nvmlInit: {detail})") from None

    def _read_driver(self) -> DriverInfo:
        driver, _ = self._try("nvmlSystemGetDriverVersion")
        cuda, _ = self._try("nvmlSystemGetCudaDriverVersion")
        nvml, _ = self._try("nvmlSystemGetNVMLVersion")
        return DriverInfo(
            driver_version=_text(driver),
            cuda_version=cuda_version_text(cuda),
            nvml_version=_text(nvml),
        )

    def _identify(self, device: _Device) -> None:
        """Handle and static identity of a GPU, read once; raises `_Lost`."""
        index = device.index
        if device.handle is None:
            handle, err = self._try("nvmlDeviceGetHandleByIndex", index)
            if err is not None:
                raise _Lost(err)
            device.handle = handle
        if device.info is not None:
            return
        handle = device.handle
        uuid, err = self._try("nvmlDeviceGetUUID", handle)
        uuid = _text(uuid)
        if uuid is None:
            raise _Lost(err or "NoUuid")
        device.uuid = uuid
        pci = self._get(index, "nvmlDeviceGetPciInfo", handle)
        device.pci_bus_id = _text(getattr(pci, "busId", None))
        product = _text(self._get(index, "nvmlDeviceGetName", handle))
        serial = _text(self._get(index, "nvmlDeviceGetSerial", handle))
        vbios = _text(self._get(index, "nvmlDeviceGetVbiosVersion", handle))
        memory = self._get(index, "nvmlDeviceGetMemoryInfo", handle)
        total = _int(getattr(memory, "total", None))
        _active, links = self._nvlink(index, handle)
        device.info = GpuInfo(
            index=index,
            uuid=uuid,
            pci_bus_id=device.pci_bus_id,
            product=product or "unknown",
            serial=serial,
            vbios=vbios,
            memory_total_mb=total // MIB if total is not None else 0,
            nvlink_links=links,
        )

    def _mark_lost(self, device: _Device, error: str) -> LostGpu:
        if device.lost != error:
            log.error(
                "GPU %d (%s, %s) is lost: %s",
                device.index,
                device.uuid or "uuid unknown",
                device.pci_bus_id or "bus id unknown",
                error,
            )
        device.lost = error
        return LostGpu(
            index=device.index, uuid=device.uuid, pci_bus_id=device.pci_bus_id, error=error
        )

    # -- GpuSource ----------------------------------------------------------------------------

    def driver(self) -> DriverInfo:
        return DriverInfo(**self._driver)

    def inventory(self) -> list[GpuInfo]:
        return [
            GpuInfo(**device.info)
            for device in self._devices
            if device.info is not None and device.lost is None
        ]

    def sample(self) -> Snapshot:
        at = iso_utc(self._clock())
        gpus: list[GpuMetrics] = []
        lost: list[LostGpu] = []
        for device in self._devices:
            try:
                self._identify(device)
                values = self._metrics(device)
            except _Lost as exc:
                lost.append(self._mark_lost(device, exc.error))
                continue
            if device.lost is not None:
                log.warning("GPU %d (%s) answers again", device.index, device.uuid)
                device.lost = None
            assert device.uuid is not None
            gpus.append(GpuMetrics(index=device.index, uuid=device.uuid, metrics=values))
        return Snapshot(at=at, gpus=gpus, lost=lost)

    def events(self) -> list[Event]:
        if self._event_set is not None and not self._threaded and not self._closed:
            for _ in range(EVENT_QUEUE_MAX):
                if self._poll_event(0) != "event":
                    break
        drained: list[Event] = []
        while True:
            try:
                drained.append(self._events.get_nowait())
            except queue.Empty:
                return drained

    def wait_for_events(self, seconds: float) -> None:
        """Poll XID events for `seconds` (without the thread; used by the recorder)."""
        deadline = time.monotonic() + seconds
        while self._event_set is not None and not self._closed:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                return
            if self._poll_event(min(left_ms, 1000)) == "error":
                return

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._event_timeout_ms / 1000 + 2)
        if self._event_set is not None:
            self._try("nvmlEventSetFree", self._event_set)
            self._event_set = None
        self._try("nvmlShutdown")

    # -- metrics ------------------------------------------------------------------------------

    def _metrics(self, device: _Device) -> dict[str, int | float | None]:
        i, h = device.index, device.handle
        # One group after the other, so NVML is called in the same order every sample.
        values = {
            **self._memory_and_load(i, h),
            **self._thermals_power_and_clocks(i, h),
            **self._memory_errors(i, h),
            **self._links_and_processes(i, h),
        }
        with self._lock:
            values[m.XID_ERRORS] = self._xid_last.get(i, 0) if i in self._xid_registered else None
        return {name: values[name] for name in m.METRIC_NAMES}

    def _memory_and_load(self, i: int, h: Any) -> dict[str, int | float | None]:
        memory = self._get(i, "nvmlDeviceGetMemoryInfo", h)
        util = self._get(i, "nvmlDeviceGetUtilizationRates", h)

        def mib(attribute: str) -> int | None:
            value = _int(getattr(memory, attribute, None))
            return value // MIB if value is not None else None

        return {
            m.GPU_UTIL: _int(getattr(util, "gpu", None)),
            m.MEM_COPY_UTIL: _int(getattr(util, "memory", None)),
            m.FB_USED: mib("used"),
            m.FB_FREE: mib("free"),
            m.FB_TOTAL: mib("total"),
        }

    def _thermals_power_and_clocks(self, i: int, h: Any) -> dict[str, int | float | None]:
        temp, err = self._read(i, "nvmlDeviceGetTemperature", h, TEMPERATURE_GPU)
        if err == "FunctionNotFound":  # drivers that dropped the deprecated call
            temp = self._get(i, "nvmlDeviceGetTemperatureV", h, TEMPERATURE_GPU)
        memory_temp = self._field(i, h, FI_DEV_MEMORY_TEMP)
        power = _int(self._get(i, "nvmlDeviceGetPowerUsage", h))
        limit = _int(self._get(i, "nvmlDeviceGetEnforcedPowerLimit", h))
        sm_clock = self._get(i, "nvmlDeviceGetClockInfo", h, CLOCK_SM)
        mem_clock = self._get(i, "nvmlDeviceGetClockInfo", h, CLOCK_MEM)
        return {
            m.GPU_TEMP: _int(temp),
            m.MEMORY_TEMP: memory_temp,
            m.POWER_USAGE: round(power / 1000, 3) if power is not None else None,
            m.POWER_MGMT_LIMIT: round(limit / 1000, 3) if limit is not None else None,
            m.SM_CLOCK: _int(sm_clock),
            m.MEM_CLOCK: _int(mem_clock),
        }

    def _memory_errors(self, i: int, h: Any) -> dict[str, int | float | None]:
        """ECC counts, remapped rows and retired pages: how the GPU's memory is wearing."""
        ecc = {
            (kind, counter): _int(self._get(i, "nvmlDeviceGetTotalEccErrors", h, kind, counter))
            for kind in (MEMORY_ERROR_TYPE_CORRECTED, MEMORY_ERROR_TYPE_UNCORRECTED)
            for counter in (VOLATILE_ECC, AGGREGATE_ECC)
        }
        rows = self._get(i, "nvmlDeviceGetRemappedRows", h)
        rows = tuple(rows) if rows is not None and len(rows) == 4 else (None, None, None, None)
        retired_sbe = self._get(
            i, "nvmlDeviceGetRetiredPages", h, PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        )
        retired_dbe = self._get(
            i, "nvmlDeviceGetRetiredPages", h, PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        )
        retired_pending = self._get(i, "nvmlDeviceGetRetiredPagesPendingStatus", h)
        return {
            m.ECC_SBE_VOL_TOTAL: ecc[MEMORY_ERROR_TYPE_CORRECTED, VOLATILE_ECC],
            m.ECC_DBE_VOL_TOTAL: ecc[MEMORY_ERROR_TYPE_UNCORRECTED, VOLATILE_ECC],
            m.ECC_SBE_AGG_TOTAL: ecc[MEMORY_ERROR_TYPE_CORRECTED, AGGREGATE_ECC],
            m.ECC_DBE_AGG_TOTAL: ecc[MEMORY_ERROR_TYPE_UNCORRECTED, AGGREGATE_ECC],
            m.CORRECTABLE_REMAPPED_ROWS: _int(rows[0]),
            m.UNCORRECTABLE_REMAPPED_ROWS: _int(rows[1]),
            m.ROW_REMAP_PENDING: _flag(rows[2]),
            m.ROW_REMAP_FAILURE: _flag(rows[3]),
            m.RETIRED_SBE: len(retired_sbe) if retired_sbe is not None else None,
            m.RETIRED_DBE: len(retired_dbe) if retired_dbe is not None else None,
            m.RETIRED_PENDING: _flag(retired_pending),
        }

    def _links_and_processes(self, i: int, h: Any) -> dict[str, int | float | None]:
        nvlink_active, _links = self._nvlink(i, h)
        pcie_tx = self._get(i, "nvmlDeviceGetPcieThroughput", h, PCIE_UTIL_TX_BYTES)
        pcie_rx = self._get(i, "nvmlDeviceGetPcieThroughput", h, PCIE_UTIL_RX_BYTES)
        processes = self._get(i, "nvmlDeviceGetComputeRunningProcesses", h)
        return {
            m.NVLINK_ACTIVE_LINKS: nvlink_active,
            m.PCIE_TX_THROUGHPUT: _int(pcie_tx),
            m.PCIE_RX_THROUGHPUT: _int(pcie_rx),
            m.COMPUTE_PROCESSES: len(processes) if processes is not None else None,
        }

    def _field(self, index: int, handle: Any, field_id: int) -> int | float | None:
        """One NVML field value (nvmlDeviceGetFieldValues); its own return code is checked."""
        values = self._get(index, "nvmlDeviceGetFieldValues", handle, [field_id])
        if values is None or len(values) < 1:
            return None
        field = values[0]
        code = _int(getattr(field, "nvmlReturn", 0)) or 0
        if code:
            self._check(index, f"nvmlDeviceGetFieldValues({field_id})", ERROR_NAMES.get(code, "?"))
            return None
        member = VALUE_MEMBERS.get(_int(getattr(field, "valueType", None)) or 0)
        value = getattr(getattr(field, "value", None), member or "", None)
        if isinstance(value, float):
            return value if value == value else None
        return _int(value)

    def _nvlink(self, index: int, handle: Any) -> tuple[int | None, int | None]:
        """(active links, links) over links 0..17; (None, None) without NVLink."""
        active = links = 0
        for link in range(NVLINK_LINKS):
            state, err = self._try("nvmlDeviceGetNvLinkState", handle, link)
            if err is None:
                links += 1
                active += 1 if state else 0
            elif err in LOST_ERRORS:
                raise _Lost(err)
            elif err not in _NVLINK_ABSENT:
                self._warn_once(
                    (index, "nvlink", err), "GPU %d: nvmlDeviceGetNvLinkState: %s", index, err
                )
        return (active, links) if links else (None, None)

    # -- XID events ---------------------------------------------------------------------------

    def _start_events(self) -> None:
        event_set, err = self._try("nvmlEventSetCreate")
        if err is not None:
            log.info("XID events unavailable (nvmlEventSetCreate: %s)", err)
            return
        refused: dict[str, list[int]] = {}
        for device in self._devices:
            if device.handle is None or device.lost is not None:
                continue
            _, err = self._try(
                "nvmlDeviceRegisterEvents", device.handle, EVENT_TYPE_XID_CRITICAL_ERROR, event_set
            )
            if err is None:
                self._xid_registered.add(device.index)
                self._handle_index[_handle_key(device.handle)] = device.index
            else:
                refused.setdefault(err, []).append(device.index)
        for err, indexes in refused.items():
            log.info(
                "XID events not available on GPU %s (nvmlDeviceRegisterEvents: %s); "
                "their %s is null",
                ",".join(map(str, indexes)),
                err,
                m.XID_ERRORS,
            )
        if not self._xid_registered:
            self._try("nvmlEventSetFree", event_set)
            return
        self._event_set = event_set
        if self._threaded:
            self._thread = threading.Thread(
                target=self._event_loop, name="nodeagent-xid", daemon=True
            )
            self._thread.start()

    def _event_loop(self) -> None:
        while not self._stop.is_set():
            try:
                outcome = self._poll_event(self._event_timeout_ms)
            except Exception:
                log.exception("XID watcher failed; retrying")
                outcome = "error"
            if outcome == "error":
                self._stop.wait(1.0)

    def _poll_event(self, timeout_ms: int) -> str:
        """Wait for one event: "event", "timeout" or "error"."""
        data, err = self._try("nvmlEventSetWait_v2", self._event_set, timeout_ms)
        if err == "Timeout":
            return "timeout"
        if err is not None:
            self._warn_once(("events", err), "nvmlEventSetWait_v2 failed: %s", err)
            return "error"
        if not (_int(getattr(data, "eventType", 0)) or 0) & EVENT_TYPE_XID_CRITICAL_ERROR:
            return "event"
        xid = _int(getattr(data, "eventData", None))
        gpu = self._event_gpu(getattr(data, "device", None))
        device = self._devices[gpu] if gpu is not None and gpu < len(self._devices) else None
        event = Event(
            at=iso_utc(self._clock()),
            type="xid",
            gpu=gpu,
            uuid=device.uuid if device is not None else None,
            xid=xid,
            message=xid_message(xid) if xid is not None else "XID",
        )
        if gpu is not None and xid is not None:
            with self._lock:
                self._xid_last[gpu] = xid
        log.warning("GPU %s (%s): %s", gpu, event["uuid"], event["message"])
        while True:
            try:
                self._events.put_nowait(event)
                break
            except queue.Full:
                try:
                    self._events.get_nowait()
                    self._dropped_events += 1
                except queue.Empty:
                    pass
        return "event"

    def _event_gpu(self, handle: Any) -> int | None:
        if handle is None:
            return None
        index = self._handle_index.get(_handle_key(handle))
        if index is not None:
            return index
        value, err = self._try("nvmlDeviceGetIndex", handle)
        return _int(value) if err is None else None
