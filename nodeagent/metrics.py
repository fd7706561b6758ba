"""The metrics a node agent reports per GPU per sample, named after NVIDIA dcgm-exporter's fields.

Standard library only and free of side effects: the platform imports this module to validate and
store reports. Every report carries every name in `METRIC_NAMES` for every GPU, with a number or
null (null: the GPU or driver does not support it, e.g. ECC on a GeForce card).

Two names are ours, not DCGM's (DCGM has no single field for them):
    DCGM_FI_DEV_NVLINK_ACTIVE_LINKS  number of NVLink links whose state is active
                                     (nvmlDeviceGetNvLinkState for links 0..17)
    DCGM_FI_DEV_COMPUTE_PROCESSES    number of compute processes running on the GPU
"""

from typing import NamedTuple


class Metric(NamedTuple):
    name: str
    unit: str
    description: str
    nvml: str  # where the node agent reads it


GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_TOTAL = "DCGM_FI_DEV_FB_TOTAL"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
MEMORY_TEMP = "DCGM_FI_DEV_MEMORY_TEMP"
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
POWER_MGMT_LIMIT = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
MEM_CLOCK = "DCGM_FI_DEV_MEM_CLOCK"
ECC_SBE_VOL_TOTAL = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
ECC_DBE_VOL_TOTAL = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ECC_SBE_AGG_TOTAL = "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"
ECC_DBE_AGG_TOTAL = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
CORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
UNCORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
ROW_REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"
RETIRED_SBE = "DCGM_FI_DEV_RETIRED_SBE"
RETIRED_DBE = "DCGM_FI_DEV_RETIRED_DBE"
RETIRED_PENDING = "DCGM_FI_DEV_RETIRED_PENDING"
NVLINK_ACTIVE_LINKS = "DCGM_FI_DEV_NVLINK_ACTIVE_LINKS"
PCIE_TX_THROUGHPUT = "DCGM_FI_DEV_PCIE_TX_THROUGHPUT"
PCIE_RX_THROUGHPUT = "DCGM_FI_DEV_PCIE_RX_THROUGHPUT"
COMPUTE_PROCESSES = "DCGM_FI_DEV_COMPUTE_PROCESSES"
XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"

METRICS: tuple[Metric, ...] = (
    Metric(GPU_UTIL, "%", "GPU utilisation", "nvmlDeviceGetUtilizationRates().gpu"),
    Metric(MEM_COPY_UTIL, "%", "memory copy utilisation", "nvmlDeviceGetUtilizationRates().memory"),
    Metric(FB_USED, "MiB", "framebuffer memory used", "nvmlDeviceGetMemoryInfo().used"),
    Metric(FB_FREE, "MiB", "framebuffer memory free", "nvmlDeviceGetMemoryInfo().free"),
    Metric(FB_TOTAL, "MiB", "framebuffer memory total", "nvmlDeviceGetMemoryInfo().total"),
    Metric(GPU_TEMP, "°C", "GPU temperature", "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"),
    Metric(MEMORY_TEMP, "°C", "memory (HBM) temperature", "field NVML_FI_DEV_MEMORY_TEMP"),
    Metric(POWER_USAGE, "W", "power draw", "nvmlDeviceGetPowerUsage (mW)"),
    Metric(POWER_MGMT_LIMIT, "W", "enforced power limit", "nvmlDeviceGetEnforcedPowerLimit (mW)"),
    Metric(SM_CLOCK, "MHz", "SM clock", "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"),
    Metric(MEM_CLOCK, "MHz", "memory clock", "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)"),
    Metric(ECC_SBE_VOL_TOTAL, "errors", "corrected ECC errors since boot", "TotalEccErrors"),
    Metric(ECC_DBE_VOL_TOTAL, "errors", "uncorrected ECC errors since boot", "TotalEccErrors"),
    Metric(ECC_SBE_AGG_TOTAL, "errors", "corrected ECC errors, lifetime", "TotalEccErrors"),
    Metric(ECC_DBE_AGG_TOTAL, "errors", "uncorrected ECC errors, lifetime", "TotalEccErrors"),
    Metric(CORRECTABLE_REMAPPED_ROWS, "rows", "rows remapped, correctable", "GetRemappedRows"),
    Metric(UNCORRECTABLE_REMAPPED_ROWS, "rows", "rows remapped, uncorrectable", "GetRemappedRows"),
    Metric(ROW_REMAP_FAILURE, "0/1", "a row remapping failed", "GetRemappedRows"),
    Metric(ROW_REMAP_PENDING, "0/1", "a remapping waits for a GPU reset", "GetRemappedRows"),
    Metric(RETIRED_SBE, "pages", "pages retired for single-bit errors", "GetRetiredPages"),
    Metric(RETIRED_DBE, "pages", "pages retired for double-bit errors", "GetRetiredPages"),
    Metric(RETIRED_PENDING, "0/1", "a page retirement waits for reboot", "RetiredPagesPending"),
    Metric(NVLINK_ACTIVE_LINKS, "links", "NVLink links active (ours)", "GetNvLinkState 0..17"),
    Metric(PCIE_TX_THROUGHPUT, "KB/s", "PCIe transmit throughput", "GetPcieThroughput(TX)"),
    Metric(PCIE_RX_THROUGHPUT, "KB/s", "PCIe receive throughput", "GetPcieThroughput(RX)"),
    Metric(COMPUTE_PROCESSES, "processes", "compute processes (ours)", "ComputeRunningProcesses"),
    Metric(XID_ERRORS, "xid", "last XID seen since the agent started, 0 if none", "XID events"),
)

METRIC_NAMES: tuple[str, ...] = tuple(metric.name for metric in METRICS)
METRICS_BY_NAME: dict[str, Metric] = {metric.name: metric for metric in METRICS}
