"""`python -m nodeagent record`: recording through a call layer, and pynvml's ctypes results."""

import ctypes
import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from nodeagent.fixture import FixtureNvml, load_fixture
from nodeagent.nvml import NvmlSource
from nodeagent.record import jsonable, record
from tests.nodeagent import FIXTURES, FixedClock, has_nvidia_driver, run_python


def source(data: dict[str, Any]) -> NvmlSource:
    return NvmlSource(FixtureNvml(data, strict=True), threaded_events=False, clock=FixedClock())


def replayed(data: dict[str, Any]) -> tuple[Any, ...]:
    gpus = source(data)
    snapshot = gpus.sample()
    return gpus.driver(), gpus.inventory(), snapshot["gpus"], snapshot["lost"], gpus.events()


@pytest.mark.parametrize(
    "name", ["h100_8x_healthy", "a100_8x_notsupported", "rtx4090_8x", "h100_gpu_lost"]
)
def test_a_recording_replays_like_the_original(name: str, tmp_path: Path) -> None:
    original = load_fixture(FIXTURES / f"{name}.json")
    out = tmp_path / "recorded.json"

    fixture, problems = record(out, lib=FixtureNvml(original, strict=True))

    assert problems == []
    assert json.loads(out.read_text()) == fixture
    assert fixture["format"] == "starverse-nvml-fixture/1"
    assert fixture["provenance"] == "recorded on hardware with `python -m nodeagent record`"
    assert fixture["recorded_on"].endswith("Z")
    assert fixture["system"] == original["system"]
    assert replayed(fixture) == replayed(original)


def test_recording_catches_xid_events(tmp_path: Path) -> None:
    original = load_fixture(FIXTURES / "h100_xid79.json")
    fixture, problems = record(
        tmp_path / "xid.json", lib=FixtureNvml(original, strict=True), events_seconds=0.1
    )
    assert problems == []
    assert fixture["events"] == [
        {
            "gpu": 3,
            "eventType": 8,
            "eventData": 79,
            "gpuInstanceId": 0xFFFFFFFF,
            "computeInstanceId": 0xFFFFFFFF,
        }
    ]
    assert fixture["devices"] == original["devices"]


def test_redacted_recording_hides_uuids_and_serials(tmp_path: Path) -> None:
    original = load_fixture(FIXTURES / "h100_8x_healthy.json")
    fixture, problems = record(
        tmp_path / "r.json", lib=FixtureNvml(original, strict=True), redact=True
    )
    assert problems == []
    before = [d["nvmlDeviceGetUUID"] for d in original["devices"]]
    after = [d["nvmlDeviceGetUUID"] for d in fixture["devices"]]
    assert set(before).isdisjoint(after)
    assert all(uuid.startswith("GPU-") and len(uuid) == 40 for uuid in after)
    assert all(
        len(a["nvmlDeviceGetSerial"]) == len(b["nvmlDeviceGetSerial"]) == 13
        and a["nvmlDeviceGetSerial"] != b["nvmlDeviceGetSerial"]
        for a, b in zip(original["devices"], fixture["devices"], strict=True)
    )


def test_pynvml_ctypes_results_become_fixture_json() -> None:
    memory = pynvml.c_nvmlMemory_t(total=85520809984, free=7314866176, used=78205943808)
    assert jsonable(memory) == {"total": 85520809984, "free": 7314866176, "used": 78205943808}

    util = pynvml.c_nvmlUtilization_t(gpu=87, memory=41)
    assert jsonable(util) == {"gpu": 87, "memory": 41}

    pci = pynvml.nvmlPciInfo_t()
    pci.busId = b"00000000:18:00.0"
    pci.busIdLegacy = b"0000:18:00.0"
    pci.bus = 0x18
    pci.pciDeviceId = 0x233010DE
    assert jsonable(pci) == {
        "busIdLegacy": "0000:18:00.0",
        "domain": 0,
        "bus": 24,
        "device": 0,
        "pciDeviceId": 0x233010DE,
        "pciSubSystemId": 0,
        "busId": "00000000:18:00.0",
    }

    values = (pynvml.c_nvmlFieldValue_t * 2)()
    values[0].fieldId = pynvml.NVML_FI_DEV_MEMORY_TEMP
    values[0].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    values[0].value.uiVal = 74
    values[1].fieldId = pynvml.NVML_FI_DEV_MEMORY_TEMP
    values[1].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    assert jsonable(values) == [
        {"fieldId": 82, "valueType": 1, "value": 74},
        {"fieldId": 82, "error": "NotSupported"},
    ]

    process = pynvml.nvmlFriendlyObject(
        {"pid": 4242, "usedGpuMemory": 1 << 30, "gpuInstanceId": 0xFFFFFFFF}
    )
    assert jsonable([process]) == [
        {"pid": 4242, "usedGpuMemory": 1 << 30, "gpuInstanceId": 0xFFFFFFFF}
    ]
    assert jsonable((0, 1, 1, 0)) == [0, 1, 1, 0]
    assert jsonable(b"550.54.15\x00\x00") == "550.54.15"


def test_recorded_ctypes_shapes_replay_through_the_source() -> None:
    """What `jsonable` writes for pynvml's structs is what the fixture layer replays."""
    data = load_fixture(FIXTURES / "h100_8x_healthy.json")
    values = (pynvml.c_nvmlFieldValue_t * 1)()
    values[0].fieldId = 82
    values[0].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    values[0].value.ullVal = 71
    data["devices"][0]["nvmlDeviceGetFieldValues([82])"] = jsonable(values)
    pci = pynvml.nvmlPciInfo_t()
    pci.busId = b"00000000:19:00.0"
    data["devices"][0]["nvmlDeviceGetPciInfo"] = jsonable(pci)
    gpus = NvmlSource(FixtureNvml(data, strict=True), threaded_events=False)
    assert gpus.sample()["gpus"][0]["metrics"]["DCGM_FI_DEV_MEMORY_TEMP"] == 71
    assert gpus.inventory()[0]["pci_bus_id"] == "00000000:19:00.0"


def test_real_ctypes_handles_are_told_apart_by_address() -> None:
    from nodeagent.nvml import _handle_key

    first = ctypes.cast(ctypes.c_void_p(0x1000), pynvml.c_nvmlDevice_t)
    again = ctypes.cast(ctypes.c_void_p(0x1000), pynvml.c_nvmlDevice_t)
    other = ctypes.cast(ctypes.c_void_p(0x2000), pynvml.c_nvmlDevice_t)
    assert _handle_key(first) == _handle_key(again) == 0x1000
    assert _handle_key(other) == 0x2000


@pytest.mark.skipif(has_nvidia_driver(), reason="this machine has the NVIDIA driver")
def test_record_cli_without_driver_exits_2(tmp_path: Path) -> None:
    result = run_python(["-m", "nodeagent", "record", "--out", str(tmp_path / "x.json")])
    assert result.returncode == 2
    assert result.stderr == (
        "NVIDIA driver not found: is this a GPU node with the driver installed? "
        "(nvmlInit: NVML Shared Library Not Found)\n"
    )
    assert not (tmp_path / "x.json").exists()
