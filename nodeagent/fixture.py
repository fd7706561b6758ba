"""A pynvml-like call layer replaying a recorded NVML fixture, for tests and demos.

`FixtureNvml` has the functions `nvml.NvmlSource` calls, with pynvml's signatures and result
shapes (attribute objects for structs, `busId` as bytes, field values with `nvmlReturn`,
`valueType` and a `value` union, errors as `NVMLError` carrying the NVML return code in `.value`),
so a fixture goes through the very normalisation and error handling code the real NVML does.

Fixture format (`starverse-nvml-fixture/1`), as written by `python -m nodeagent record`:

    {"format": "starverse-nvml-fixture/1",
     "provenance": "...", "recorded_on": "2026-…Z" | null, "description": "...",
     "system": {"nvmlSystemGetDriverVersion": "550.54.15", "nvmlDeviceGetCount": 8, ...},
     "devices": [{"nvmlDeviceGetUUID": "GPU-…", "nvmlDeviceGetClockInfo(1)": 1980, ...}, ...],
     "events": [{"gpu": 3, "eventType": 8, "eventData": 79}]}

A call's key is the function's name, followed, when it takes arguments besides the device
handle, by those arguments as JSON in parentheses (NVML enums as numbers):
`nvmlDeviceGetTotalEccErrors(1,0)`, `nvmlDeviceGetFieldValues([82])`. A value is what pynvml
returns, with structs as objects, or `{"error": "NotSupported"}` (any NVML error name, see
`nvml.ERROR_NAMES`) for a call that raised. A device's `"default"` answers every call it does
not list (`{"error": "GpuIsLost"}` for a GPU fallen off the bus). A field value is
`{"fieldId": 82, "valueType": 1, "value": 74}` or `{"fieldId": 82, "error": "NotSupported"}`.
`system.nvmlInit` may hold an error too (a node without a driver).

A call the fixture does not hold raises FunctionNotFound (null in reports), or `FixtureMissing`
with `strict=True` (the tests: a fixture must hold every call the source makes).
"""

import json
import threading
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from nodeagent.nvml import ERROR_CODES, ERROR_NAMES, NvmlSource

FORMAT = "starverse-nvml-fixture/1"
NOT_RECORDED = "real-shaped, not yet recorded on hardware"


class FixtureMissing(LookupError):
    """A strict fixture does not hold a call the source made."""


class NVMLError(Exception):
    """pynvml's NVMLError, as far as callers see it: the NVML return code in `.value`."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return ERROR_NAMES.get(self.value, f"NVML error {self.value}")


# A fixture stands in for pynvml (no types) from parsed JSON: its handles and values are Any.
def call_key(fn: str, args: tuple[Any, ...]) -> str:
    """`nvmlDeviceGetClockInfo(1)`; plain name without arguments."""
    if not args:
        return fn
    return f"{fn}({json.dumps(list(args), separators=(',', ':'))[1:-1]})"


def raise_recorded(value: Any) -> None:
    """Raise the NVML error a recorded value stands for, if it stands for one."""
    if isinstance(value, dict) and set(value) == {"error"}:
        name = value["error"]
        if name not in ERROR_CODES:
            raise ValueError(f"unknown NVML error name in fixture: {name!r}")
        raise NVMLError(ERROR_CODES[name])


def _namespace(value: Any) -> Any:
    if isinstance(value, dict):
        return SimpleNamespace(**{key: _namespace(item) for key, item in value.items()})
    if isinstance(value, list):
        return [_namespace(item) for item in value]
    return value


def _field_value(item: dict[str, Any]) -> SimpleNamespace:
    union: dict[str, int | float] = dict.fromkeys(
        ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal"), 0
    )
    union["dVal"] = 0.0
    error = item.get("error")
    value_type = int(item.get("valueType", 0))
    if error is None:
        member = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")[value_type]
        union[member] = item["value"]
    return SimpleNamespace(
        fieldId=item.get("fieldId", 0),
        scopeId=item.get("scopeId", 0),
        timestamp=item.get("timestamp", 0),
        latencyUsec=item.get("latencyUsec", 0),
        valueType=value_type,
        nvmlReturn=ERROR_CODES[error] if error else 0,
        value=SimpleNamespace(**union),
    )


def _pci_info(value: dict[str, Any]) -> SimpleNamespace:
    shaped = dict(value)
    for key in ("busId", "busIdLegacy"):  # c_char arrays: pynvml hands them out as bytes
        if isinstance(shaped.get(key), str):
            shaped[key] = shaped[key].encode()
    return SimpleNamespace(**shaped)


_SHAPERS: dict[str, Any] = {
    "nvmlDeviceGetPciInfo": _pci_info,
    "nvmlDeviceGetFieldValues": lambda items: [_field_value(item) for item in items],
    "nvmlDeviceGetRemappedRows": tuple,
}


class FixtureHandle:
    """A device handle (pynvml: an opaque ctypes pointer)."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<FixtureHandle {self.index}>"


class FixtureEventSet:
    def __init__(self) -> None:
        self.registered: set[int] = set()
        self.freed = False


class FixtureNvml:
    """pynvml, as far as `NvmlSource` uses it, answering from a fixture."""

    NVMLError = NVMLError

    def __init__(self, fixture: dict[str, Any], *, strict: bool = False) -> None:
        if fixture.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} fixture (format: {fixture.get('format')!r})")
        self.fixture = fixture
        self.strict = strict
        self.system: dict[str, Any] = fixture.get("system", {})
        self.devices: list[dict[str, Any]] = fixture.get("devices", [])
        self.calls: list[str] = []  # "3:nvmlDeviceGetUUID", "nvmlInit", … in call order
        self._pending_events: deque[dict[str, Any]] = deque(fixture.get("events", []))
        self._lock = threading.Lock()
        self._handles = [FixtureHandle(index) for index in range(len(self.devices))]
        self.initialised = False

    # -- lookup -------------------------------------------------------------------------------

    def _missing(self, where: str, key: str) -> Any:
        if self.strict:
            raise FixtureMissing(f"the fixture has no {key!r} for {where}")
        raise NVMLError(ERROR_CODES["FunctionNotFound"])

    def _system(self, key: str) -> Any:
        with self._lock:
            self.calls.append(key)
        if key not in self.system:
            return self._missing("the system", key)
        value = self.system[key]
        raise_recorded(value)
        return value

    def _device(self, handle: Any, fn: str, args: tuple[Any, ...]) -> Any:
        if not isinstance(handle, FixtureHandle):
            raise TypeError(f"{fn}: not a device handle: {handle!r}")
        entry = self.devices[handle.index]
        key = call_key(fn, args)
        with self._lock:
            self.calls.append(f"{handle.index}:{key}")
        if key in entry:
            value = entry[key]
        elif "default" in entry:
            value = entry["default"]
        else:
            return self._missing(f"GPU {handle.index}", key)
        raise_recorded(value)
        shaper = _SHAPERS.get(fn, _namespace)
        return shaper(value)

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvmlDevice"):
            raise AttributeError(name)

        def call(handle: Any, *args: Any) -> Any:
            return self._device(handle, name, args)

        call.__name__ = name
        return call

    # -- library and system -------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if "nvmlInit" in self.system:
            self._system("nvmlInit")
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        version: str = self._system("nvmlSystemGetDriverVersion")
        return version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        version: int = self._system("nvmlSystemGetCudaDriverVersion")
        return version

    def nvmlSystemGetNVMLVersion(self) -> str:
        version: str = self._system("nvmlSystemGetNVMLVersion")
        return version

    def nvmlDeviceGetCount(self) -> int:
        count: int = self._system("nvmlDeviceGetCount")
        return count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FixtureHandle:
        if not 0 <= index < len(self.devices):
            raise NVMLError(ERROR_CODES["InvalidArgument"])
        entry = self.devices[index]
        value = entry.get("nvmlDeviceGetHandleByIndex", entry.get("default"))
        raise_recorded(value)
        return self._handles[index]

    def nvmlDeviceGetIndex(self, handle: FixtureHandle) -> int:
        entry = self.devices[handle.index]
        raise_recorded(entry.get("nvmlDeviceGetIndex", entry.get("default")))
        return handle.index

    # -- events -------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> FixtureEventSet:
        if "nvmlEventSetCreate" in self.system:
            self._system("nvmlEventSetCreate")
        return FixtureEventSet()

    def nvmlDeviceRegisterEvents(
        self, handle: FixtureHandle, event_types: int, event_set: FixtureEventSet
    ) -> None:
        self._device(handle, "nvmlDeviceRegisterEvents", (event_types,))
        event_set.registered.add(handle.index)

    def nvmlEventSetWait_v2(self, event_set: FixtureEventSet, timeout_ms: int) -> SimpleNamespace:
        with self._lock:
            while self._pending_events:
                event = self._pending_events.popleft()
                if event["gpu"] in event_set.registered:
                    return SimpleNamespace(
                        device=self._handles[event["gpu"]],
                        eventType=event.get("eventType", 0x8),
                        eventData=event["eventData"],
                        gpuInstanceId=event.get("gpuInstanceId", 0xFFFFFFFF),
                        computeInstanceId=event.get("computeInstanceId", 0xFFFFFFFF),
                    )
        # Nothing (more) to deliver: NVML waits out the timeout, then raises Timeout.
        threading.Event().wait(min(timeout_ms / 1000, 0.05))
        raise NVMLError(ERROR_CODES["Timeout"])

    def nvmlEventSetFree(self, event_set: FixtureEventSet) -> None:
        event_set.freed = True


def load_fixture(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        fixture: dict[str, Any] = json.load(handle)
    return fixture


def open_fixture_source(
    path: str | Path, *, strict: bool = False, **source_options: Any
) -> NvmlSource:
    """An `NvmlSource` replaying the fixture at `path` (`--source fixture:PATH`). Its XID events
    are polled at each `events()` (not by a thread), so a replay is deterministic."""
    source_options.setdefault("threaded_events", False)
    return NvmlSource(FixtureNvml(load_fixture(path), strict=strict), **source_options)
