"""nvml.py through the fixture call layer: normalisation, NotSupported, lost GPUs, XID events,
and a missing driver (through the fake layer, and through the real pynvml on a driverless machine).
"""

import copy
import logging
from typing import Any

import pynvml
import pytest

from nodeagent import metrics as m
from nodeagent import nvml
from nodeagent.fixture import NOT_RECORDED, FixtureMissing, FixtureNvml, load_fixture
from nodeagent.nvml import NvmlSource, NvmlUnavailable
from nodeagent.report import build_report, pending_report
from nodeagent.source import Event
from tests.nodeagent import FIXTURES, FixedClock, has_nvidia_driver, run_python, wait_for

H100_GPU0_UUID = "GPU-399df670-20bf-30c0-a141-fb41420c8c64"
H100_GPU3_UUID = "GPU-f162bd34-57bf-31cc-5e93-b45c039ea952"
DRIVER_MISSING_REAL = (
    "NVIDIA driver not found: is this a GPU node with the driver installed? "
    "(nvmlInit: NVML Shared Library Not Found)"
)


def fixture(name: str) -> dict[str, Any]:
    return load_fixture(FIXTURES / f"{name}.json")


def source(data: dict[str, Any], **options: Any) -> NvmlSource:
    options.setdefault("threaded_events", False)
    options.setdefault("clock", FixedClock())
    return NvmlSource(FixtureNvml(data, strict=True), **options)


def test_h100_healthy_gpu0_normalises_exactly() -> None:
    gpus = source(fixture("h100_8x_healthy"))
    snapshot = gpus.sample()

    assert gpus.driver() == {
        "driver_version": "550.54.15",
        "cuda_version": "12.4",
        "nvml_version": "12.550.54.15",
    }
    assert gpus.inventory()[0] == {
        "index": 0,
        "uuid": H100_GPU0_UUID,
        "pci_bus_id": "00000000:18:00.0",
        "product": "NVIDIA H100 80GB HBM3",
        "serial": "1654926060928",
        "vbios": "96.00.89.00.01",
        "memory_total_mb": 81559,
        "nvlink_links": 18,
    }
    assert snapshot["at"] == "2026-11-29T21:00:15Z"
    assert snapshot["lost"] == []
    assert snapshot["gpus"][0]["index"] == 0
    assert snapshot["gpus"][0]["uuid"] == H100_GPU0_UUID
    assert snapshot["gpus"][0]["metrics"] == {
        "DCGM_FI_DEV_GPU_UTIL": 87,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 41,
        "DCGM_FI_DEV_FB_USED": 74583,
        "DCGM_FI_DEV_FB_FREE": 6976,
        "DCGM_FI_DEV_FB_TOTAL": 81559,
        "DCGM_FI_DEV_GPU_TEMP": 66,
        "DCGM_FI_DEV_MEMORY_TEMP": 74,
        "DCGM_FI_DEV_POWER_USAGE": 612.345,
        "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0,
        "DCGM_FI_DEV_SM_CLOCK": 1980,
        "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": 0,
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": 0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
        "DCGM_FI_DEV_ROW_REMAP_PENDING": 0,
        "DCGM_FI_DEV_RETIRED_SBE": None,
        "DCGM_FI_DEV_RETIRED_DBE": None,
        "DCGM_FI_DEV_RETIRED_PENDING": None,
        "DCGM_FI_DEV_NVLINK_ACTIVE_LINKS": 18,
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": 1520,
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": 8740,
        "DCGM_FI_DEV_COMPUTE_PROCESSES": 1,
        "DCGM_FI_DEV_XID_ERRORS": 0,
    }
    assert list(snapshot["gpus"][0]["metrics"]) == list(m.METRIC_NAMES)
    assert [gpu["index"] for gpu in snapshot["gpus"]] == list(range(8))
    assert [gpu["metrics"][m.GPU_UTIL] for gpu in snapshot["gpus"]][4:] == [0, 0, 0, 0]


def test_required_metric_names_are_listed_in_one_place() -> None:
    required = [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_TOTAL",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_NVLINK_ACTIVE_LINKS",
        "DCGM_FI_DEV_XID_ERRORS",
    ]
    assert [name for name in m.METRIC_NAMES if name in required] == required
    assert len(set(m.METRIC_NAMES)) == len(m.METRIC_NAMES) == 27


def test_a100_not_supported_fields_are_null_not_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent")
    gpus = source(fixture("a100_8x_notsupported"))
    snapshot = gpus.sample()

    assert len(snapshot["gpus"]) == 8
    assert snapshot["lost"] == []
    for gpu in snapshot["gpus"]:
        values = gpu["metrics"]
        assert values[m.MEMORY_TEMP] is None
        assert values[m.CORRECTABLE_REMAPPED_ROWS] is None
        assert values[m.UNCORRECTABLE_REMAPPED_ROWS] is None
        assert values[m.ROW_REMAP_PENDING] is None
        assert values[m.ROW_REMAP_FAILURE] is None
        assert values[m.RETIRED_SBE] is None
        assert values[m.NVLINK_ACTIVE_LINKS] == 12
        assert values[m.FB_TOTAL] == 81920
        assert values[m.POWER_MGMT_LIMIT] == 400.0
        assert values[m.ECC_DBE_VOL_TOTAL] == 0
    assert snapshot["gpus"][0]["metrics"][m.GPU_UTIL] == 93
    assert gpus.inventory()[0]["nvlink_links"] == 12
    assert gpus.driver()["cuda_version"] == "12.2"
    # NotSupported (and InvalidArgument past the 12th NVLink link) are expected: nothing logged.
    assert [r.message for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_rtx4090_has_no_ecc_nvlink_remapping_or_serial() -> None:
    gpus = source(fixture("rtx4090_8x"))
    values = gpus.sample()["gpus"][0]["metrics"]
    inventory = gpus.inventory()[0]

    for name in (
        m.ECC_SBE_VOL_TOTAL,
        m.ECC_DBE_VOL_TOTAL,
        m.ECC_SBE_AGG_TOTAL,
        m.ECC_DBE_AGG_TOTAL,
        m.NVLINK_ACTIVE_LINKS,
        m.CORRECTABLE_REMAPPED_ROWS,
        m.UNCORRECTABLE_REMAPPED_ROWS,
        m.ROW_REMAP_FAILURE,
        m.ROW_REMAP_PENDING,
        m.MEMORY_TEMP,
    ):
        assert values[name] is None, name
    assert inventory["nvlink_links"] is None
    assert inventory["serial"] is None
    assert inventory["product"] == "NVIDIA GeForce RTX 4090"
    assert inventory["memory_total_mb"] == 24564
    assert values[m.GPU_UTIL] == 97
    assert values[m.POWER_MGMT_LIMIT] == 450.0
    assert values[m.MEM_CLOCK] == 10501


def test_gpu_lost_is_reported_and_the_other_seven_still_report() -> None:
    gpus = source(fixture("h100_gpu_lost"))
    snapshot = gpus.sample()

    assert snapshot["lost"] == [
        {"index": 5, "uuid": None, "pci_bus_id": None, "error": "GpuIsLost"}
    ]
    assert [gpu["index"] for gpu in snapshot["gpus"]] == [0, 1, 2, 3, 4, 6, 7]
    assert [gpu["index"] for gpu in gpus.inventory()] == [0, 1, 2, 3, 4, 6, 7]
    assert snapshot["gpus"][0]["metrics"][m.GPU_UTIL] == 87

    body = build_report(
        "gpu-h100-01",
        [pending_report(gpus.driver(), gpus.inventory(), snapshot, gpus.events())],
        dropped_reports=0,
        sent_at="2026-11-29T21:00:15Z",
    )
    assert body["lost_gpus"] == [
        {"index": 5, "uuid": None, "pci_bus_id": None, "error": "GpuIsLost"}
    ]
    assert len(body["inventory"]) == 7
    assert len(body["samples"][0]["gpus"]) == 7


def test_gpu_lost_while_running_keeps_its_identity_and_comes_back() -> None:
    data = fixture("h100_8x_healthy")
    healthy_gpu2 = copy.deepcopy(data["devices"][2])
    gpus = source(data)
    uuid = gpus.inventory()[2]["uuid"]

    data["devices"][2] = {
        "nvmlDeviceGetHandleByIndex": "<handle>",
        "default": {"error": "GpuIsLost"},
    }
    snapshot = gpus.sample()
    assert snapshot["lost"] == [
        {"index": 2, "uuid": uuid, "pci_bus_id": "00000000:3A:00.0", "error": "GpuIsLost"}
    ]
    assert [gpu["index"] for gpu in gpus.inventory()] == [0, 1, 3, 4, 5, 6, 7]

    data["devices"][2] = healthy_gpu2
    snapshot = gpus.sample()
    assert snapshot["lost"] == []
    assert [gpu["index"] for gpu in snapshot["gpus"]] == list(range(8))


def test_reset_required_marks_the_gpu_lost_with_that_error() -> None:
    data = fixture("h100_8x_healthy")
    data["devices"][1]["nvmlDeviceGetTotalEccErrors(1,0)"] = {"error": "ResetRequired"}
    snapshot = source(data).sample()
    assert snapshot["lost"][0]["index"] == 1
    assert snapshot["lost"][0]["error"] == "ResetRequired"
    assert len(snapshot["gpus"]) == 7


def test_xid79_event_reaches_events_with_the_gpu_uuid() -> None:
    gpus = source(fixture("h100_xid79"))
    first = gpus.sample()
    events = gpus.events()

    assert events == [
        {
            "at": "2026-11-29T21:00:15Z",
            "type": "xid",
            "gpu": 3,
            "uuid": H100_GPU3_UUID,
            "xid": 79,
            "message": "XID 79: GPU has fallen off the bus",
        }
    ]
    assert gpus.events() == []
    gpu3 = first["gpus"][3]["metrics"]
    assert gpu3[m.ECC_DBE_VOL_TOTAL] == 2
    assert gpu3[m.ECC_DBE_AGG_TOTAL] == 2
    assert gpu3[m.UNCORRECTABLE_REMAPPED_ROWS] == 1
    assert gpu3[m.ROW_REMAP_PENDING] == 1
    second = gpus.sample()
    assert [gpu["metrics"][m.XID_ERRORS] for gpu in second["gpus"]] == [0, 0, 0, 79, 0, 0, 0, 0]


def test_xid_events_are_watched_by_a_thread() -> None:
    gpus = source(fixture("h100_xid79"), threaded_events=True, event_timeout_ms=20)
    try:
        seen: list[Event] = []

        def drained() -> bool:
            seen.extend(gpus.events())
            return bool(seen)

        assert wait_for(drained)
        assert [(event["gpu"], event["xid"], event["uuid"]) for event in seen] == [
            (3, 79, H100_GPU3_UUID)
        ]
    finally:
        gpus.close()
    assert gpus._thread is not None
    assert not gpus._thread.is_alive()


def test_event_registration_not_supported_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent")
    data = fixture("h100_8x_healthy")
    for device in data["devices"]:
        device["nvmlDeviceRegisterEvents(8)"] = {"error": "NotSupported"}
    gpus = source(data)
    snapshot = gpus.sample()
    gpus.sample()

    messages = [r.getMessage() for r in caplog.records if "RegisterEvents" in r.getMessage()]
    assert messages == [
        "XID events not available on GPU 0,1,2,3,4,5,6,7 (nvmlDeviceRegisterEvents: "
        "NotSupported); their DCGM_FI_DEV_XID_ERRORS is null"
    ]
    assert {gpu["metrics"][m.XID_ERRORS] for gpu in snapshot["gpus"]} == {None}
    assert gpus.events() == []


def test_unexpected_error_on_a_field_is_null_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = fixture("h100_8x_healthy")
    data["devices"][0]["nvmlDeviceGetPowerUsage"] = {"error": "InsufficientSize"}
    gpus = source(data)
    first = gpus.sample()
    gpus.sample()

    assert first["gpus"][0]["metrics"][m.POWER_USAGE] is None
    assert first["gpus"][1]["metrics"][m.POWER_USAGE] is not None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "GPU 0: nvmlDeviceGetPowerUsage failed (InsufficientSize); reported as null"
    ]


def test_driver_missing_through_the_call_layer() -> None:
    data = fixture("h100_8x_healthy")
    data["system"]["nvmlInit"] = {"error": "DriverNotLoaded"}
    with pytest.raises(NvmlUnavailable) as caught:
        source(data)
    assert str(caught.value) == (
        "NVIDIA driver not found: is this a GPU node with the driver installed? "
        "(nvmlInit: DriverNotLoaded)"
    )


def test_other_init_failures_are_unavailable_too() -> None:
    data = fixture("h100_8x_healthy")
    data["system"]["nvmlInit"] = {"error": "LibRmVersionMismatch"}
    with pytest.raises(NvmlUnavailable) as caught:
        source(data)
    assert str(caught.value) == "NVML could not be initialised (nvmlInit: LibRmVersionMismatch)"


def test_oserror_at_init_means_driver_missing() -> None:
    class NoLibrary:
        NVMLError = pynvml.NVMLError

        def nvmlInit(self) -> None:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    with pytest.raises(NvmlUnavailable) as caught:
        NvmlSource(NoLibrary())
    assert str(caught.value) == (
        "NVIDIA driver not found: is this a GPU node with the driver installed? "
        "(nvmlInit: libnvidia-ml.so.1: cannot open shared object file)"
    )


@pytest.mark.skipif(has_nvidia_driver(), reason="this machine has the NVIDIA driver")
def test_driver_missing_with_the_real_pynvml() -> None:
    with pytest.raises(NvmlUnavailable) as caught:
        NvmlSource()
    assert str(caught.value) == DRIVER_MISSING_REAL


@pytest.mark.skipif(has_nvidia_driver(), reason="this machine has the NVIDIA driver")
def test_cli_without_driver_prints_one_message_and_exits_2() -> None:
    result = run_python(
        [
            "-m",
            "nodeagent",
            "--source",
            "nvml",
            "--once",
            "--platform-url",
            "http://127.0.0.1:9",
            "--node",
            "gpu-h100-01",
            "--token",
            "svn_test",
        ]
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == DRIVER_MISSING_REAL + "\n"


def test_strict_fixture_refuses_a_call_it_does_not_hold() -> None:
    data = fixture("h100_8x_healthy")
    del data["devices"][0]["nvmlDeviceGetPowerUsage"]
    with pytest.raises(FixtureMissing):
        source(data).sample()
    lenient = NvmlSource(FixtureNvml(data), threaded_events=False)
    assert lenient.sample()["gpus"][0]["metrics"][m.POWER_USAGE] is None


def test_fixtures_are_marked_real_shaped_and_not_recorded() -> None:
    names = sorted(path.name for path in FIXTURES.glob("*.json"))
    assert names == [
        "a100_8x_notsupported.json",
        "h100_8x_healthy.json",
        "h100_gpu_lost.json",
        "h100_xid79.json",
        "rtx4090_8x.json",
    ]
    for name in names:
        data = load_fixture(FIXTURES / name)
        assert data["format"] == "starverse-nvml-fixture/1"
        assert data["provenance"] == NOT_RECORDED
        assert data["recorded_on"] is None
        assert len(data["devices"]) == data["system"]["nvmlDeviceGetCount"] == 8


def test_every_fixture_replays_strictly() -> None:
    for path in sorted(FIXTURES.glob("*.json")):
        gpus = source(load_fixture(path))
        snapshot = gpus.sample()
        gpus.events()
        assert len(snapshot["gpus"]) + len(snapshot["lost"]) == 8, path.name
        gpus.close()


def test_the_call_layer_matches_pynvml() -> None:
    """The fake layer must look like pynvml: the same functions, codes and enum values."""
    layer = FixtureNvml(fixture("h100_xid79"), strict=True)
    gpus = NvmlSource(layer, threaded_events=False)
    gpus.sample()
    gpus.events()
    gpus.close()
    called = {call.split(":", 1)[-1].split("(", 1)[0] for call in layer.calls}
    called |= {
        "nvmlInit",
        "nvmlShutdown",
        "nvmlDeviceGetHandleByIndex",
        "nvmlEventSetCreate",
        "nvmlEventSetWait_v2",
        "nvmlEventSetFree",
        "nvmlDeviceGetIndex",
        "nvmlDeviceGetTemperatureV",
    }
    assert "nvmlDeviceGetRemappedRows" in called
    assert [name for name in sorted(called) if not callable(getattr(pynvml, name, None))] == []

    for code, name in nvml.ERROR_NAMES.items():
        assert type(pynvml.NVMLError(code)).__name__ == f"NVMLError_{name}"
    assert nvml.TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU
    assert nvml.CLOCK_SM == pynvml.NVML_CLOCK_SM
    assert nvml.CLOCK_MEM == pynvml.NVML_CLOCK_MEM
    assert nvml.MEMORY_ERROR_TYPE_CORRECTED == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    assert nvml.MEMORY_ERROR_TYPE_UNCORRECTED == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    assert nvml.VOLATILE_ECC == pynvml.NVML_VOLATILE_ECC
    assert nvml.AGGREGATE_ECC == pynvml.NVML_AGGREGATE_ECC
    assert (
        nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        == pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    )
    assert (
        nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )
    assert nvml.PCIE_UTIL_TX_BYTES == pynvml.NVML_PCIE_UTIL_TX_BYTES
    assert nvml.PCIE_UTIL_RX_BYTES == pynvml.NVML_PCIE_UTIL_RX_BYTES
    assert nvml.FI_DEV_MEMORY_TEMP == pynvml.NVML_FI_DEV_MEMORY_TEMP
    xid_critical = pynvml.nvmlEventTypeXidCriticalError
    assert xid_critical == nvml.EVENT_TYPE_XID_CRITICAL_ERROR
    assert nvml.VALUE_MEMBERS == {
        pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
    }
    assert [name for name, _ in pynvml.c_nvmlValue_t._fields_] == list(nvml.VALUE_MEMBERS.values())


def test_error_names_follow_return_codes() -> None:
    assert nvml.error_name(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) == "GpuIsLost"
    assert nvml.error_name(pynvml.NVMLError_NotSupported()) == "NotSupported"
    assert nvml.cuda_version_text(12040) == "12.4"
    assert nvml.cuda_version_text(11080) == "11.8"
    assert nvml.cuda_version_text(0) is None
