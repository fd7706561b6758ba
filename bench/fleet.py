"""telemetry_ingest: GPU samples stored per second from full node-agent reports (128 nodes ×
8 GPUs, through validation and storage), against a raw bulk INSERT of the same rows, report by
report, in the same run and the same process, the two taking turns round by round.

telemetry_10k_gpus: 1,250 nodes × 8 GPUs posting their reports over HTTP to the report route
(token check, JSON, validation, storage: the whole request, in one process = one web worker)
for a few rounds: samples/s sustained against the 10,000 / 15 s that such a fleet sends."""

import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import recreate_database, report, setup_django

NODES = 128
GPUS = 8
ROUNDS = int(os.environ.get("BENCH_TELEMETRY_ROUNDS", "4"))
FLEET_GPUS = 10_000
REPORT_EVERY_S = 15


def _report(node: str, at: datetime) -> dict:
    stamp = at.isoformat().replace("+00:00", "Z")
    metrics = {
        "DCGM_FI_DEV_GPU_UTIL": 91,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 42,
        "DCGM_FI_DEV_FB_USED": 70211,
        "DCGM_FI_DEV_FB_FREE": 11348,
        "DCGM_FI_DEV_FB_TOTAL": 81559,
        "DCGM_FI_DEV_GPU_TEMP": 67,
        "DCGM_FI_DEV_MEMORY_TEMP": 71,
        "DCGM_FI_DEV_POWER_USAGE": 641.2,
        "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0,
        "DCGM_FI_DEV_SM_CLOCK": 1980,
        "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_NVLINK_ACTIVE_LINKS": 18,
    }
    return {
        "agent_version": "0.1.0",
        "node": node,
        "sent_at": stamp,
        "driver": {"driver_version": "550.54.15", "cuda_version": "12.4", "nvml_version": "12"},
        "inventory": [
            {
                "index": i,
                "uuid": f"GPU-{node}-{i}",
                "pci_bus_id": f"0000:{i}",
                "product": "NVIDIA H100 80GB HBM3",
                "serial": None,
                "vbios": None,
                "memory_total_mb": 81559,
                "nvlink_links": 18,
            }
            for i in range(GPUS)
        ],
        "samples": [
            {
                "at": stamp,
                "gpus": [
                    {"index": i, "uuid": f"GPU-{node}-{i}", "metrics": dict(metrics)}
                    for i in range(GPUS)
                ],
            }
        ],
        "events": [],
        "lost_gpus": [],
        "dropped_reports": 0,
    }


def run() -> list[dict]:
    return [_ingest(), _sustained()]


def _sustained() -> dict:
    recreate_database()
    setup_django()
    import json

    from django.test import Client

    from fleet.models import Node
    from starverse.accounts.tokens import NODE_TOKEN_PREFIX, token_generate, token_hash

    count = FLEET_GPUS // GPUS
    tokens = [token_generate(NODE_TOKEN_PREFIX) for _ in range(count)]
    Node.objects.bulk_create(
        [
            Node(
                name=f"fleet-{n:04d}",
                gpu_product="NVIDIA H100 80GB HBM3",
                gpu_count=GPUS,
                gpu_memory_mb=81559,
                token_hash=token_hash(token),
            )
            for n, token in enumerate(tokens)
        ]
    )
    client = Client(HTTP_HOST="localhost")
    start = datetime.now(UTC) - timedelta(minutes=5)

    def post_round(r: int) -> int:
        stored = 0
        for n, token in enumerate(tokens):
            name = f"fleet-{n:04d}"
            body = json.dumps(_report(name, start + timedelta(seconds=REPORT_EVERY_S * r)))
            response = client.post(
                f"/api/v1/nodes/{name}/report",
                body,
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {token}",
            )
            assert response.status_code == 202, response.content
            stored += response.json()["accepted_samples"]
        return stored

    post_round(0)  # the first reports register each node's inventory; not measured
    began = time.perf_counter()
    stored = sum(post_round(r) for r in range(1, 3))
    ours = stored / (time.perf_counter() - began)
    return report(
        "telemetry_10k_gpus",
        ours,
        "samples/s",
        FLEET_GPUS / REPORT_EVERY_S,
        f"{FLEET_GPUS:,} GPUs reporting every {REPORT_EVERY_S} s",
        "ratio >= 1 (one web worker carries them)",
    )


def _ingest() -> dict:
    recreate_database()
    setup_django()
    from django.db import connection, transaction

    from fleet.models import Gpu, Node
    from fleet.services import report_ingest
    from fleet.telemetry import report_parse

    nodes = [
        Node.objects.create(
            name=f"bench-{n:03d}",
            gpu_product="NVIDIA H100 80GB HBM3",
            gpu_count=GPUS,
            gpu_memory_mb=81559,
        )
        for n in range(NODES)
    ]
    start = datetime.now(UTC) - timedelta(minutes=ROUNDS + 1)
    for node in nodes:  # first report registers the inventory; not measured
        report_ingest(
            node=node, report=report_parse(_report(node.name, start), node_name=node.name)
        )

    bodies = [
        [_report(node.name, start + timedelta(seconds=15 * (r + 1))) for node in nodes]
        for r in range(ROUNDS)
    ]
    gpu_ids = {
        node.pk: list(Gpu.objects.filter(node=node).order_by("index").values_list("pk", flat=True))
        for node in nodes
    }
    sql = (
        "INSERT INTO instances_gpusample (gpu_id, at, util, mem_util, mem_used_mb, temp_c, "
        "power_w, sm_clock_mhz, ecc_dbe) VALUES "
        + ", ".join(["(%s,%s,%s,%s,%s,%s,%s,%s,%s)"] * GPUS)
    )
    # Ours and the baseline take turns, round by round, so that a change in the machine's load
    # (other work on a shared host) weighs on both alike.
    stored = raw = 0
    ours_s = raw_s = 0.0
    for r, round_bodies in enumerate(bodies):
        began = time.perf_counter()
        for node, body in zip(nodes, round_bodies, strict=True):
            stored += report_ingest(node=node, report=report_parse(body, node_name=node.name))
        ours_s += time.perf_counter() - began

        at = start + timedelta(seconds=15 * (r + 1), milliseconds=1)
        began = time.perf_counter()
        for node in nodes:
            params: list[Any] = []
            for gpu_id in gpu_ids[node.pk]:
                params += [gpu_id, at, 91, 42, 70211, 67, 641.2, 1980, 0]
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql, params)
            raw += GPUS
        raw_s += time.perf_counter() - began
    ours, baseline = stored / ours_s, raw / raw_s
    return report(
        "telemetry_ingest",
        ours,
        "samples/s",
        baseline,
        "raw INSERT of the same 8 rows per report",
        "ratio >= 0.70",
    )
