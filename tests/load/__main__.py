"""`make load`: python -m tests.load [--start N] [--step N] [--max N] [--stage-s S] [--nodes N]
(tests/load/__init__.py). Exit status 0 once it has measured; the figures are printed."""

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.chaos.stack import PY, REPO, Stack
from tests.load.figures import ACCESS_FORMAT, server_side

H100 = "NVIDIA H100 80GB HBM3"
ACCOUNTS = 20  # the simulated people share these accounts (a lab's members, say)
HELD_P99_MS, STOP_P99_MS = 200, 500


def prepare(stack: Stack, nodes: int, data_path: Path) -> None:
    """Django pointed at the stack's database: the accounts (funded, an API token and a console
    session each), `nodes` fleet nodes with their agent tokens; written to data_path."""
    os.environ.update(stack.env())
    import django

    django.setup()
    import logging

    logging.getLogger().setLevel(logging.WARNING)
    from django.core.management import call_command
    from django.test import Client

    from compute.models import Offering
    from fleet.models import Node
    from fleet.services import node_token_issue, report_ingest
    from fleet.telemetry import report_parse
    from tests.factories import fund, make_token, make_user
    from tests.load.report import node_report

    call_command("fleet_sync", stdout=io.StringIO())
    tokens, sessions = [], []
    for _ in range(ACCOUNTS):
        user = make_user()
        fund(user, 100_000_000)
        tokens.append(make_token(user)[1])
        client = Client()
        client.force_login(user)
        sessions.append(client.cookies["sessionid"].value)
    made = Node.objects.bulk_create(
        Node(name=f"load-{i:04d}", gpu_product=H100, gpu_count=8, gpu_memory_mb=81559,
             interconnect="nvlink")
        for i in range(nodes)
    )  # fmt: skip
    fleet = [{"name": node.name, "token": node_token_issue(node=node)} for node in made]
    for node in made:  # each node's first report registers its GPUs: done before measuring
        report_ingest(node=node, report=report_parse(node_report(node.name), node_name=node.name))
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    data = {"nodes": fleet, "tokens": tokens, "sessions": sessions,
            "offering": offering.pk, "image": "pytorch-2.1"}  # fmt: skip
    data_path.write_text(json.dumps(data))


def locust(stack: Stack, args: argparse.Namespace, data: Path, results: Path) -> None:
    """The node agents (tests/load/fleet.py) in a process of their own, then Locust's people
    until the last stage; the agents' log feeds each stage's figures."""
    fleet_log = stack.log / "fleet.log"
    fleet_log.write_text("")
    with (stack.log / "fleet.err").open("w") as err:
        fleet = subprocess.Popen(
            [PY, "-m", "tests.load.fleet", str(data), stack.web_url, str(fleet_log)],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=err,
        )  # fmt: skip
    try:
        _locust(stack, args, data, results, fleet_log)
    finally:
        fleet.terminate()
        fleet.wait(timeout=30)


def _locust(
    stack: Stack, args: argparse.Namespace, data: Path, results: Path, fleet_log: Path
) -> None:
    env = {**os.environ, "LOAD_DATA": str(data), "LOAD_RESULTS": str(results),
           "LOAD_FLEET_LOG": str(fleet_log),
           "LOAD_START": str(args.start), "LOAD_STEP": str(args.step), "LOAD_MAX": str(args.max),
           "LOAD_STAGE_S": str(args.stage_s), "PYTHONPATH": str(REPO)}  # fmt: skip
    command = [PY, "-m", "locust", "-f", str(REPO / "tests" / "load" / "locustfile.py")]
    command += ["--headless", "--host", stack.web_url, "--only-summary", "--loglevel", "ERROR"]
    with (stack.log / "locust.log").open("w") as log:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("stage:"):
                print(f"  {line[6:].strip()}", flush=True)
        process.wait()


def verdict(stages: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    held = [s for s in stages if s["p99_ms"] <= HELD_P99_MS and not s["errors"]]
    broke = [s for s in stages if s["p99_ms"] > STOP_P99_MS or s["errors"]]
    lines = []
    if held:
        best = max(held, key=lambda s: s["people"])
        lines.append(f"held at p99 ≤ {HELD_P99_MS} ms with no error: {best['people']} people + "
                     f"{best['nodes']} nodes reporting every 15 s ({best['rps']} requests/s, "
                     f"p50 {best['p50_ms']} ms, p99 {best['p99_ms']} ms)")  # fmt: skip
    else:
        lines.append(f"no stage held p99 ≤ {HELD_P99_MS} ms with no error")
    if broke:
        first = broke[0]
        lines.append(f"saturates at {first['people']} people + {first['nodes']} nodes: p99 "
                     f"{first['p99_ms']} ms, {first['errors']} errors {first['error_kinds']} "
                     f"({first['rps']} requests/s)")  # fmt: skip
    else:
        lines.append(f"did not saturate up to {args.max} people (p99 ≤ {STOP_P99_MS} ms)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.load", description=__doc__)
    parser.add_argument("--start", type=int, default=100, help="people in the first stage")
    parser.add_argument("--step", type=int, default=100, help="people added each stage")
    parser.add_argument("--max", type=int, default=1500, help="people at most")
    parser.add_argument("--stage-s", type=float, default=45.0, help="seconds per stage")
    parser.add_argument("--nodes", type=int, default=1024, help="node agents reporting")
    parser.add_argument("--root", default=str(REPO / "var" / "load" / "run"))
    args = parser.parse_args(argv)
    root = Path(args.root)
    shutil.rmtree(root, ignore_errors=True)
    # templates and static files read once, as production serves them (starverse/settings/dev.py)
    os.environ.setdefault("DEV_AUTORELOAD", "0")
    stack = Stack(root, REPO / "var" / "load" / "pg", fleet="h100=16")
    try:
        stack.start()
        stack.start_platform(web_args=("--access-logfile", str(stack.log / "access.log"),
                                       "--access-logformat", ACCESS_FORMAT))  # fmt: skip
        prepare(stack, args.nodes, root / "data.json")
        stack.wait_ready()
        print(f"load: {args.nodes} node agents, people from {args.start} by {args.step} every "
              f"{args.stage_s:.0f} s (logs {stack.log}); each stage:", flush=True)  # fmt: skip
        locust(stack, args, root / "data.json", root / "results.json")
    finally:
        stack.stop()
    stages = (
        json.loads((root / "results.json").read_text()) if (root / "results.json").exists() else []
    )
    for line in verdict(stages, args):
        print(line)
    if stages:
        print("gunicorn's time for the same requests (from its parse of a request to its answer):")
        for stage in stages:
            print(f"  {server_side(stage, stack.log / 'access.log')}")
    print(f"(on {os.cpu_count()} CPUs, shared with whatever else runs on this machine)")
    return 0 if stages else 1


if __name__ == "__main__":
    sys.exit(main())
