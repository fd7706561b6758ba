"""A node agent's report as nodeagent/report.py sends it: 8 H100s, one sample."""

import random
from datetime import UTC, datetime
from typing import Any


def _iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_report(node: str) -> dict[str, Any]:
    metrics = {
        "DCGM_FI_DEV_GPU_UTIL": random.randint(0, 100), "DCGM_FI_DEV_MEM_COPY_UTIL": 40,
        "DCGM_FI_DEV_FB_USED": 61234, "DCGM_FI_DEV_GPU_TEMP": 64,
        "DCGM_FI_DEV_POWER_USAGE": 612.5, "DCGM_FI_DEV_SM_CLOCK": 1980,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0, "DCGM_FI_DEV_MEMORY_TEMP": None,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
    }  # fmt: skip
    gpus = range(8)
    return {
        "agent_version": "0.1.0", "node": node, "sent_at": _iso(),
        "driver": {"driver_version": "550.54.15", "cuda_version": "12.4",
                   "nvml_version": "12.550.54.15"},
        "inventory": [{"index": i, "uuid": f"GPU-{node}-{i}",
                       "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
                       "product": "NVIDIA H100 80GB HBM3", "serial": None,
                       "vbios": "96.00.89.00.01", "memory_total_mb": 81559,
                       "nvlink_links": 18} for i in gpus],
        "samples": [{"at": _iso(), "gpus": [{"index": i, "uuid": f"GPU-{node}-{i}",
                                             "metrics": dict(metrics)} for i in gpus]}],
        "events": [], "lost_gpus": [], "dropped_reports": 0,
    }  # fmt: skip
