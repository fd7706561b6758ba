"""`make chaos`: python -m tests.chaos [--seed N] [--rounds N] [--beat-pause-s S] ...; --short
is the version `make test` runs. Prints the faults injected and the invariants checked; exit
status 1 when any invariant failed."""

import argparse
import shutil
import sys
import time
from pathlib import Path

from tests.chaos.harness import Options, run
from tests.chaos.stack import REPO

# The short version: every kind of fault once (compressed pauses), in about three minutes.
SHORT = Options(
    rounds=1,
    beat_pause_s=5.0,
    kube_outage_s=5.0,
    settle_s=150.0,
    users=2,
    reconcile_interval_s=5,
    stuck_after_s=10,
    preflight_lease_s=10,
    # a 2-node cluster (the pre-flight kill's), a 2-rank job of a few steps and an endpoint in
    # flight beside the instances
    kinds=True,
    job_steps=15,
    # each kill of the worker after a fault that lets it start again; the API outage last.
    # The pre-flight kill orders a cluster of its own: its killed round is taken over once its
    # lease (CLUSTER_PREFLIGHT_LEASE_S) ran out, and the cluster runs.
    faults=(
        "worker kill -9 mid-provisioning",
        "node agent flapping",
        "worker kill -9 mid-pre-flight",
        "worker kill -9 mid-metering",
        "PostgreSQL restarted",
        "worker kill -9 mid-queue drain",
        "web kill -9 mid-order",
        "web kill -9 mid-webhook",
        "Redis flushed",
        "Kubernetes API unreachable",
    ),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--short", action="store_true", help="the version make test runs")
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--rounds", type=int, default=Options.rounds)
    parser.add_argument("--faults-per-round", type=int, default=Options.faults_per_round)
    parser.add_argument("--beat-pause-s", type=float, default=Options.beat_pause_s)
    parser.add_argument("--kube-outage-s", type=float, default=Options.kube_outage_s)
    parser.add_argument("--settle-s", type=float, default=Options.settle_s)
    parser.add_argument("--job-steps", type=int, default=Options.job_steps)
    parser.add_argument("--root", default=str(REPO / "var" / "chaos" / "run"), help="logs, state")
    parser.add_argument(
        "--pg",
        default=str(REPO / "var" / "chaos" / "pg"),
        help="its PostgreSQL's folder (kept: the migrated template database is reused)",
    )
    args = parser.parse_args(argv)
    if args.short:
        options = Options(**{**vars(SHORT), "seed": args.seed})
    else:
        options = Options(
            seed=args.seed,
            rounds=args.rounds,
            faults_per_round=args.faults_per_round,
            beat_pause_s=args.beat_pause_s,
            kube_outage_s=args.kube_outage_s,
            settle_s=args.settle_s,
            job_steps=args.job_steps,
        )
    root = Path(args.root)
    shutil.rmtree(root, ignore_errors=True)
    started = time.monotonic()
    report = run(options, root, Path(args.pg))
    took = time.monotonic() - started
    print(
        f"\nchaos (seed {options.seed}, {took:.0f} s: set up {report.set_up_s:.0f} s, rounds "
        f"and checks {took - report.set_up_s:.0f} s; logs {root / 'log'}):"
    )
    for name, count in sorted(report.faults.items()):
        print(f"  fault injected {count}× : {name}")
    print(
        f"  {sum(report.faults.values())} faults injected, {report.checks} invariants checked, "
        f"{len(report.violations)} violations"
    )
    print(f"  traffic: {report.traffic}")
    for line in report.violations:
        print(f"  VIOLATION {line}")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
