"""Shared plumbing for `make bench`: a PostgreSQL database of its own, Django set up against it,
and the one JSON line each benchmark prints."""

import json
import os
import subprocess
import time
from typing import Any
from urllib.parse import urlparse

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/starverse_bench"


def database_url() -> str:
    return os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)


def setup_django() -> None:
    os.environ["DATABASE_URL"] = database_url()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ["DEBUG"] = "false"  # no query log kept in memory
    os.environ["LOG_LEVEL"] = "WARNING"  # one log line per posting would be measured too
    import django

    django.setup()


def recreate_database() -> None:
    """A fresh, migrated bench database. Our own open connections are closed first: the DROP
    below terminates every session on the database, ours included."""
    from django.conf import settings

    if settings.configured:
        from django.db import connections

        connections.close_all()
    url = urlparse(database_url())
    name = url.path.lstrip("/")
    admin = [
        "psql",
        "-q",
        "-h",
        url.hostname or "127.0.0.1",
        "-p",
        str(url.port or 5432),
        "-U",
        url.username or "postgres",
        "-d",
        "postgres",
        "-c",
    ]
    subprocess.run([*admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], check=True)
    subprocess.run([*admin, f'CREATE DATABASE "{name}"'], check=True)
    setup_django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def pgbench(script: str, *, clients: int, seconds: int) -> float:
    """Transactions per second of a pgbench custom script at the given concurrency."""
    url = urlparse(database_url())
    path = "/tmp/starverse-bench.sql"  # noqa: S108 - a scratch file for pgbench only
    with open(path, "w") as handle:
        handle.write(script)
    result = subprocess.run(
        [
            "pgbench",
            "-n",
            "-h",
            url.hostname or "127.0.0.1",
            "-p",
            str(url.port or 5432),
            "-U",
            url.username or "postgres",
            "-c",
            str(clients),
            "-j",
            str(clients),
            "-T",
            str(seconds),
            "-f",
            path,
            url.path.lstrip("/"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    for line in result.stdout.splitlines():
        if line.startswith("tps = "):
            return float(line.split()[2])
    raise RuntimeError(f"pgbench printed no tps:\n{result.stdout}\n{result.stderr}")


def report(
    name: str, value: float, unit: str, baseline: float, baseline_name: str, goal: str
) -> dict:
    line = {
        "bench": name,
        "value": round(value, 2),
        "unit": unit,
        "baseline": round(baseline, 2),
        "baseline_name": baseline_name,
        # equal at zero (no wait either way) is a ratio of 1; against zero otherwise, none
        "ratio": round(value / baseline, 3) if baseline else (1.0 if value == 0 else None),
        "goal": goal,
    }
    print(json.dumps(line), flush=True)
    return line


def raw_pod_running(api: Any, name: str, node: str, *, poll_s: float = 0.02) -> None:
    """The baseline of the provisioning benches: one plain pod pinned to `node`, created
    straight through the client, waited for until Running."""
    api.create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
                "containers": [{"name": "c", "image": "busybox"}],
            },
        },
    )
    while api.read_namespaced_pod(name, "default").status.phase != "Running":
        time.sleep(poll_s)
