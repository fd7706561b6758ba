"""Record an NVML fixture on a GPU machine: `python -m nodeagent record --out h200_8x.json`.

The recorder does not have its own list of calls: it runs the ordinary `NvmlSource` (open, one
inventory, one sample, optionally a few seconds of XID events) over `RecordingNvml`, a call layer
that forwards every call to the real pynvml and writes down what it returned or raised, keyed as
`fixture.FixtureNvml` replays it. So a fixture holds exactly the calls the agent makes, and the
replay goes through the same code. Before writing, the recording is replayed (strictly) through
`FixtureNvml` and must give the same inventory and metrics as the live read.

Needs only the driver (libnvidia-ml.so.1) and read access to the GPUs; no root, no DCGM.
"""

import ctypes
import getpass
import hashlib
import json
import logging
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodeagent import AGENT_VERSION
from nodeagent.fixture import FORMAT, FixtureNvml, call_key
from nodeagent.nvml import ERROR_CODES, ERROR_NAMES, NvmlSource, error_name, load_pynvml
from nodeagent.source import iso_utc, utc_now

log = logging.getLogger(__name__)
# The recorder wraps pynvml, which ships no types: its handles and results are Any here.

_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
# Calls whose result is not data (handles, event sets) or that the fixture format answers itself.
FUNCTION_NOT_FOUND = ERROR_CODES["FunctionNotFound"]
_UNRECORDED = frozenset({"nvmlInit", "nvmlShutdown", "nvmlEventSetCreate", "nvmlEventSetFree"})


class RecordedHandle:
    """Wraps a real device handle so the recorder knows which GPU a call is about."""

    def __init__(self, index: int, real: Any) -> None:
        self.index = index
        self.real = real


def jsonable(value: Any) -> Any:
    """A pynvml result as JSON: ctypes structs as objects, char arrays as text, field values as
    {"fieldId", "valueType", "value"} or {"fieldId", "error"}."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return value.split(b"\x00", 1)[0].decode("utf-8", "replace")
    if hasattr(value, "nvmlReturn") and hasattr(value, "valueType"):
        item: dict[str, Any] = {"fieldId": int(value.fieldId)}
        if value.nvmlReturn:
            item["error"] = ERROR_NAMES.get(int(value.nvmlReturn), f"Error{value.nvmlReturn}")
            return item
        member = _VALUE_MEMBERS[int(value.valueType)]
        item["valueType"] = int(value.valueType)
        item["value"] = jsonable(getattr(value.value, member))
        return item
    if isinstance(value, ctypes.Structure | ctypes.Union):
        return {name: jsonable(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, ctypes.Array | list | tuple):
        return [jsonable(item) for item in value]
    if hasattr(value, "__dict__"):  # pynvml's nvmlFriendlyObject, SimpleNamespace
        return {key: jsonable(item) for key, item in vars(value).items()}
    return repr(value)


class RecordingNvml:
    """A call layer forwarding to `lib` (the real pynvml) and recording every answer."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self.NVMLError = lib.NVMLError
        self.NVMLLibraryMismatchError = getattr(lib, "NVMLLibraryMismatchError", ())
        self.system: dict[str, Any] = {}
        self.devices: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._handle_index: dict[int, int] = {}
        self._handles: dict[int, RecordedHandle] = {}

    def _device_entry(self, index: int) -> dict[str, Any]:
        return self.devices.setdefault(index, {})

    def _note(self, entry: dict[str, Any], key: str, call: Callable[[], Any]) -> Any:
        try:
            result = call()
        except self.NVMLError as exc:
            entry[key] = {"error": error_name(exc)}
            raise
        except self.NVMLLibraryMismatchError:
            entry[key] = {"error": "FunctionNotFound"}
            raise
        entry[key] = jsonable(result)
        return result

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)
        real = getattr(self._lib, name, None)

        def call(*args: Any) -> Any:
            func = real if real is not None else self._absent
            if args and isinstance(args[0], RecordedHandle):
                handle, rest = args[0], args[1:]
                entry = self._device_entry(handle.index)
                return self._note(entry, call_key(name, rest), lambda: func(handle.real, *rest))
            if name in _UNRECORDED:
                return func(*args)
            return self._note(self.system, call_key(name, args), lambda: func(*args))

        return call

    def _absent(self, *_args: Any) -> Any:
        """A function this pynvml does not have: NVML's FunctionNotFound, recorded as such."""
        raise self.NVMLError(FUNCTION_NOT_FOUND)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> RecordedHandle:
        entry = self._device_entry(index)
        real = self._note(
            entry,
            "nvmlDeviceGetHandleByIndex",
            lambda: self._lib.nvmlDeviceGetHandleByIndex(index),
        )
        entry["nvmlDeviceGetHandleByIndex"] = "<handle>"
        handle = RecordedHandle(index, real)
        self._handles[index] = handle
        self._handle_index[_address(real)] = index
        return handle

    def nvmlDeviceRegisterEvents(
        self, handle: RecordedHandle, event_types: int, event_set: Any
    ) -> None:
        entry = self._device_entry(handle.index)
        self._note(
            entry,
            call_key("nvmlDeviceRegisterEvents", (event_types,)),
            lambda: self._lib.nvmlDeviceRegisterEvents(handle.real, event_types, event_set),
        )

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        data = self._lib.nvmlEventSetWait_v2(event_set, timeout_ms)  # Timeout: not recorded
        index = self._handle_index.get(_address(data.device))
        if index is None:
            index = int(self._lib.nvmlDeviceGetIndex(data.device))
        self.events.append(
            {
                "gpu": index,
                "eventType": int(data.eventType),
                "eventData": int(data.eventData),
                "gpuInstanceId": int(data.gpuInstanceId),
                "computeInstanceId": int(data.computeInstanceId),
            }
        )
        return _Event(data, self._handles.get(index))

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        real = handle.real if isinstance(handle, RecordedHandle) else handle
        return int(self._lib.nvmlDeviceGetIndex(real))


class _Event:
    """An event as the source sees it: the real data, with the device as a `RecordedHandle`."""

    def __init__(self, data: Any, handle: RecordedHandle | None) -> None:
        self.device = handle
        self.eventType = data.eventType
        self.eventData = data.eventData
        self.gpuInstanceId = data.gpuInstanceId
        self.computeInstanceId = data.computeInstanceId


def _address(handle: Any) -> int:
    try:
        value = ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return id(handle)
    return value if value is not None else id(handle)


def _redact(fixture: dict[str, Any]) -> None:
    """Replace UUIDs and serial numbers by stable stand-ins (same input, same stand-in)."""
    for entry in fixture["devices"]:
        uuid = entry.get("nvmlDeviceGetUUID")
        if isinstance(uuid, str):
            digest = hashlib.sha256(uuid.encode()).hexdigest()
            entry["nvmlDeviceGetUUID"] = (
                f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
            )
        serial = entry.get("nvmlDeviceGetSerial")
        if isinstance(serial, str):
            digits = str(int(hashlib.sha256(serial.encode()).hexdigest(), 16))
            entry["nvmlDeviceGetSerial"] = digits[: len(serial)]


def _normalised(source: NvmlSource) -> dict[str, Any]:
    snapshot = source.sample()
    return {
        "driver": source.driver(),
        "inventory": source.inventory(),
        "gpus": [{**gpu, "metrics": dict(gpu["metrics"])} for gpu in snapshot["gpus"]],
        "lost": snapshot["lost"],
    }


def record(
    out: str | Path,
    *,
    lib: Any = None,
    events_seconds: float = 0.0,
    description: str = "",
    redact: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """Record a fixture from NVML (`lib`: the real pynvml by default) into `out`.

    Returns the fixture and the differences found replaying it (empty when it replays exactly).
    Raises `NvmlUnavailable` without a driver."""
    real = lib if lib is not None else load_pynvml()
    recorder = RecordingNvml(real)
    started = utc_now()
    source = NvmlSource(recorder, threaded_events=False)
    try:
        live = _normalised(source)
        if events_seconds > 0:
            source.wait_for_events(events_seconds)
    finally:
        source.close()

    count = recorder.system.get("nvmlDeviceGetCount")
    count = count if isinstance(count, int) else len(recorder.devices)
    products = sorted({gpu["product"] for gpu in live["inventory"]})
    driver = live["driver"]
    fixture: dict[str, Any] = {
        "format": FORMAT,
        "provenance": "recorded on hardware with `python -m nodeagent record`",
        "recorded_on": iso_utc(started),
        "description": description
        or (
            f"{count}x {', '.join(products) or 'no readable GPU'}, "
            f"driver {driver['driver_version']}, CUDA {driver['cuda_version']}"
        ),
        "recorder": {
            "agent_version": AGENT_VERSION,
            "pynvml_version": _pynvml_version(real),
            "python": platform.python_version(),
            "kernel": platform.release(),
            "user": _user(),
            "redacted": redact,
            "events_seconds": events_seconds,
        },
        "key_format": (
            "function name, then the arguments after the device handle as JSON in parentheses "
            '(NVML enum values as numbers); {"error": NAME} for a call that raised; a device\'s '
            '"default" answers the calls it does not list'
        ),
        "system": recorder.system,
        "devices": [recorder.devices.get(index, {}) for index in range(count)],
        "events": recorder.events,
    }
    if redact:
        _redact(fixture)
    Path(out).write_text(json.dumps(fixture, indent=1) + "\n", encoding="utf-8")
    return fixture, replay_differences(fixture, live, redacted=redact)


def replay_differences(
    fixture: dict[str, Any], live: dict[str, Any], *, redacted: bool = False
) -> list[str]:
    """What the fixture, replayed strictly, reads differently from the live NVML read."""
    replay_fixture = json.loads(json.dumps(fixture))
    replay_fixture["events"] = []  # the live sample was taken before any recorded event
    try:
        source = NvmlSource(FixtureNvml(replay_fixture, strict=True), threaded_events=False)
        try:
            replayed = _normalised(source)
        finally:
            source.close()
    except Exception as exc:
        return [f"the fixture does not replay: {type(exc).__name__}: {exc}"]
    if redacted:  # identities differ on purpose
        for part in (live, replayed):
            for gpu in part["inventory"]:
                gpu["uuid"], gpu["serial"] = "", ""
            for gpu in [*part["gpus"], *part["lost"]]:
                gpu["uuid"] = ""
    problems = [
        f"{key}: live {live[key]!r} != replayed {replayed[key]!r}"
        for key in ("driver", "inventory", "lost")
        if live[key] != replayed[key]
    ]
    if len(live["gpus"]) != len(replayed["gpus"]):
        problems.append(f"{len(live['gpus'])} GPUs live, {len(replayed['gpus'])} replayed")
    for before, after in zip(live["gpus"], replayed["gpus"], strict=False):
        for name, value in before["metrics"].items():
            if after["metrics"].get(name) != value:
                problems.append(
                    f"GPU {before['index']} {name}: live {value!r} != replayed "
                    f"{after['metrics'].get(name)!r}"
                )
    return problems


def _pynvml_version(lib: Any) -> str | None:
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:
        return getattr(lib, "__version__", None)


def _user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:
        return None
