"""`make bench`: every benchmark prints one JSON line with its figure next to its baseline."""

import sys

from bench import (
    cluster_ready,
    clusters,
    endpoints,
    fleet,
    gateway,
    images,
    instances,
    jobs,
    ledger,
    sched_sim_month,
    statements,
)

BENCHMARKS = {
    "ledger": ledger.run,
    "fleet": fleet.run,
    "instances": instances.run,
    "gateway": gateway.run,
    "clusters": clusters.run,
    "cluster_ready": cluster_ready.run,
    "images": images.run,
    "save_image_10gb": images.run_save_image,
    "clone_to_running": images.clone_to_running_fresh,
    "endpoints": endpoints.run,
    "statements": statements.run,
    "jobs": jobs.run,
    "sched_sim_month": sched_sim_month.run,
}


def main(names: list[str]) -> int:
    for name in names or list(BENCHMARKS):
        BENCHMARKS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
