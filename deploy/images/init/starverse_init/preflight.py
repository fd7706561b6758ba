"""starverse-preflight: a cluster's pre-flight check (docs/user-guide.md "Clusters": the pre-flight
check). The platform's worker runs `starverse-preflight --json` in rank 0's container once every
rank of a cluster is up, and bills the cluster only when the result reaches the offering's floor.

Rank 0 launches one worker process per GPU on every node of the hostfile (/etc/starverse/
hostfile, `host slots=N`; over the cluster's shared ssh key for the other nodes, torch's own
launcher on each), and the workers, through NCCL:
1. all-reduce a few GB across every GPU of the cluster (the overall bus bandwidth);
2. then, round by round, all-reduce the same buffer within pairs of nodes, every pair of a round
   at once and no node in two pairs of one round, until each node was in two different pairs
   at least: a bad node is slow in all of its pairs, a good one fast in one at least, so the
   bad node is told apart from a bad pair.
Bandwidths are bus bandwidth in GB/s (10^9 bytes a second), as nccl-tests prints busbw: the
algorithm bandwidth (bytes / seconds) times 2(n-1)/n for n GPUs, comparable across sizes.

It prints one JSON object: {"busbw_gbps", "size_bytes", "nodes", "gpus_per_node", "pairs":
[{"round", "ranks": [a, b], "hosts": [..], "busbw_gbps"}], "per_node": [{"rank", "host",
"best_gbps"}]} (best_gbps: the fastest of the node's pairs). Standard library and torch only;
the launcher itself needs no torch."""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

HOSTFILE = "/etc/starverse/hostfile"
SSH = "/usr/bin/ssh"  # openssh-client, installed with openssh-server
DEFAULT_SIZE_GB = 4.0
WARMUP, ITERATIONS = 2, 5
# the workers' rendezvous port: next to MASTER_PORT, which the user's own jobs keep
PORT_OFFSET = 1

Pair = Tuple[int, int]


def hosts_read(text: str) -> List[Tuple[str, int]]:
    """The hostfile's (host, slots) in rank order; blank lines and comments skipped, a host
    without `slots=` has 1."""
    hosts = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        slots = 1
        for word in words[1:]:
            if word.startswith("slots="):
                slots = int(word[len("slots=") :])
        hosts.append((words[0], slots))
    return hosts


def pair_rounds(nodes: int, least: int = 2) -> List[List[Pair]]:
    """Rounds of disjoint node pairs (the circle method of a round-robin tournament: every
    round a perfect matching, no pair twice), as few as make each node part of `least`
    different pairs, or all there are (n-1 rounds; a node has only n-1 partners)."""
    if nodes < 2:
        return []
    seats = list(range(nodes)) + ([-1] if nodes % 2 else [])
    size = len(seats)
    rounds: List[List[Pair]] = []
    seen: Dict[int, int] = dict.fromkeys(range(nodes), 0)
    for _index in range(size - 1):
        pairs = []
        for i in range(size // 2):
            a, b = seats[i], seats[size - 1 - i]
            if a >= 0 and b >= 0:
                pairs.append((min(a, b), max(a, b)))
                seen[a] += 1
                seen[b] += 1
        rounds.append(sorted(pairs))
        if all(count >= min(least, nodes - 1) for count in seen.values()):
            break
        # rotate every seat but the first
        seats = [seats[0], seats[-1], *seats[1:-1]]
    return rounds


def busbw_gbps(size_bytes: int, seconds: float, gpus: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce of `size_bytes` over `gpus` GPUs, in GB/s."""
    if seconds <= 0 or gpus < 2:
        return 0.0
    return size_bytes / seconds / 1e9 * 2 * (gpus - 1) / gpus


def summary(
    *,
    overall_gbps: float,
    size_bytes: int,
    hosts: Sequence[str],
    gpus_per_node: int,
    pairs: Sequence[Tuple[int, Pair, float]],
) -> Dict[str, Any]:
    """The JSON result from the measured bandwidths: `pairs` as (round, (a, b), GB/s)."""
    best: Dict[int, float] = {}
    for _round, (a, b), gbps in pairs:
        for node in (a, b):
            best[node] = max(best.get(node, 0.0), gbps)
    return {
        "busbw_gbps": round(overall_gbps, 1),
        "size_bytes": size_bytes,
        "nodes": len(hosts),
        "gpus_per_node": gpus_per_node,
        "pairs": [
            {
                "round": number,
                "ranks": [a, b],
                "hosts": [hosts[a], hosts[b]],
                "busbw_gbps": round(gbps, 1),
            }
            for number, (a, b), gbps in pairs
        ],
        "per_node": [
            {"rank": node, "host": hosts[node], "best_gbps": round(best.get(node, 0.0), 1)}
            for node in range(len(hosts))
        ],
    }


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="starverse-preflight",
        description="NCCL all-reduce across a cluster's nodes and between pairs of them.",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--size-gb", type=float, default=DEFAULT_SIZE_GB, help="buffer, GB")
    parser.add_argument("--hostfile", default=HOSTFILE)
    # internal: one worker process under torch's launcher, writing the result to --out
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.size_gb <= 0:
        parser.error("--size-gb must be positive")
    return args


def worker_command(
    args: argparse.Namespace, *, node_rank: int, hosts: List[Tuple[str, int]], out: str
) -> List[str]:
    """One node's launch: torch's launcher with this module as the program, one process a GPU,
    meeting at rank 0's host."""
    master = os.environ.get("MASTER_ADDR") or hosts[0][0]
    port = int(os.environ.get("MASTER_PORT") or 29500) + PORT_OFFSET
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={len(hosts)}",
        f"--nproc-per-node={hosts[node_rank][1]}",
        f"--node-rank={node_rank}",
        f"--master-addr={master}",
        f"--master-port={port}",
        os.path.abspath(__file__),
        "--worker",
        f"--size-gb={args.size_gb}",
        f"--hostfile={args.hostfile}",
        *([f"--out={out}"] if out else []),
    ]


def launch(args: argparse.Namespace) -> int:
    """Start the workers on every node (ssh to the others) and print rank 0's result."""
    with open(args.hostfile) as handle:
        hosts = hosts_read(handle.read())
    if len(hosts) < 2:
        print("starverse-preflight: the hostfile lists fewer than two nodes", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "result.json")
        started = [subprocess.Popen(worker_command(args, node_rank=0, hosts=hosts, out=out))]
        for node_rank in range(1, len(hosts)):
            remote = shlex.join(worker_command(args, node_rank=node_rank, hosts=hosts, out=""))
            started.append(
                subprocess.Popen([SSH, "-o", "BatchMode=yes", hosts[node_rank][0], remote])
            )
        codes = [process.wait() for process in started]
        if any(codes) or not os.path.exists(out):
            print(f"starverse-preflight: workers ended with {codes}", file=sys.stderr)
            return 1
        with open(out) as handle:
            result = json.load(handle)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"all-reduce busbw {result['busbw_gbps']} GB/s")
        for pair in result["pairs"]:
            print(f"round {pair['round']} {' '.join(pair['hosts'])}: {pair['busbw_gbps']} GB/s")
    return 0


def worker(args: argparse.Namespace) -> int:  # pragma: no cover - needs GPUs and NCCL
    import torch  # type: ignore[import-not-found]
    import torch.distributed as dist  # type: ignore[import-not-found]

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    world, me = dist.get_world_size(), dist.get_rank()
    with open(args.hostfile) as handle:
        hosts = hosts_read(handle.read())
    per_node = world // len(hosts)
    size = int(args.size_gb * 1e9) // 4 * 4
    buffer = torch.ones(size // 4, dtype=torch.float32, device="cuda")

    def timed(group: Any) -> float:
        for _ in range(WARMUP):
            dist.all_reduce(buffer, group=group)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(ITERATIONS):
            dist.all_reduce(buffer, group=group)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / ITERATIONS

    dist.barrier()
    overall = busbw_gbps(size, timed(None), world)
    measured: List[Tuple[int, Pair, float]] = []
    for number, pairs in enumerate(pair_rounds(len(hosts)), start=1):
        # every process creates every group, in the same order (NCCL's rule)
        groups = {
            pair: dist.new_group([n * per_node + i for n in pair for i in range(per_node)])
            for pair in pairs
        }
        mine = next((pair for pair in pairs if me // per_node in pair), None)
        seconds = timed(groups[mine]) if mine is not None else 0.0
        dist.barrier()
        times: List[Any] = [None] * world
        dist.all_gather_object(times, (mine, seconds))
        for pair in pairs:
            slowest = max(s for p, s in times if p == pair)
            measured.append((number, pair, busbw_gbps(size, slowest, 2 * per_node)))
    if me == 0 and args.out:
        result = summary(
            overall_gbps=overall,
            size_bytes=size,
            hosts=[host for host, _slots in hosts],
            gpus_per_node=per_node,
            pairs=measured,
        )
        with open(args.out, "w") as handle:
            json.dump(result, handle)
    dist.destroy_process_group()
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    return worker(args) if args.worker else launch(args)


if __name__ == "__main__":
    sys.exit(main())
