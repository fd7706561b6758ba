"""Run the Kubernetes API emulator (a development stand-in) in the foreground.

    python -m devstack.kube --port 16443 --kubeconfig var/kubeconfig \\
        --fleet h100=2,a100=2,rtx4090=2,cpu=2

Logs one key=value line per request; SIGTERM or Ctrl-C stops it with exit status 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from .emulator import KubeEmulator
from .fleet import parse_fleet
from .images import BANDWIDTH_ANNOTATION, DEFAULT_BANDWIDTH_MBPS

log = logging.getLogger("devstack.kube")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.kube",
        description="Local Kubernetes API emulator: a development stand-in for a GPU cluster "
        "(not for production).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=16443)
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this emulator here")
    parser.add_argument(
        "--fleet",
        default="h100=2,a100=2,rtx4090=2,cpu=2",
        help="node profiles and counts, e.g. h100=2,a100=2,rtx4090=2,cpu=1",
    )
    parser.add_argument(
        "--node-prefix",
        default="",
        help="put before every node's name: a second emulated cluster's nodes, e.g. b-",
    )
    parser.add_argument("--pull-delay", type=float, default=0.5, help="image pull seconds")
    parser.add_argument("--start-delay", type=float, default=0.2, help="container start seconds")
    parser.add_argument("--tick", type=float, default=0.05, help="simulation tick seconds")
    parser.add_argument(
        "--eviction-grace",
        type=float,
        default=30.0,
        help="seconds before pods of a lost node are evicted",
    )
    parser.add_argument(
        "--image-sizes",
        help="JSON file of image reference -> size in bytes (what the registry would say); "
        "`manage.py catalog_image_sizes` writes the catalog's",
    )
    parser.add_argument(
        "--default-image-size",
        type=float,
        default=0.0,
        help="GB (10^9 bytes) an image not in --image-sizes weighs; 0: pulls take --pull-delay",
    )
    parser.add_argument(
        "--pull-bandwidth",
        type=float,
        default=DEFAULT_BANDWIDTH_MBPS,
        help="MB/s each node pulls images at (a node's annotation "
        f"{BANDWIDTH_ANNOTATION} overrides it)",
    )
    parser.add_argument(
        "--registry-bandwidth",
        type=float,
        default=None,
        help="MB/s a saved image's layer is pushed to the registry at (default: --pull-bandwidth)",
    )
    parser.add_argument(
        "--registry",
        default=None,
        help="a real OCI registry (http://host:port) saved images are pushed to as well, over "
        "the distribution API, when their tag names its host:port (`make run` passes the "
        "docker-registry it starts); default: the registry model only",
    )
    parser.add_argument(
        "--keda-queue-url",
        default=None,
        help="the KEDA stand-in reads in-flight counts per host here (the dev gateway's admin "
        "URL; default: the KUBE_EMULATOR_KEDA_QUEUE_URL env, else every count is 0)",
    )
    parser.add_argument(
        "--keda-polling-interval",
        type=float,
        default=None,
        help="seconds between the KEDA stand-in's reads (default 1)",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="where volumes keep their files, a directory per volume (default var/kube-volumes/, "
        "or var/kube-volumes/<prefix>/ with --node-prefix, so two emulators never share one); "
        "emptied at start unless --state-dir holds an earlier run's objects",
    )
    parser.add_argument(
        "--state-dir",
        default=None,
        help="keep the objects here (a snapshot and a journal written on each change and at "
        "SIGTERM, as etcd keeps a real API server's) and load them at start; default: in "
        "memory only",
    )
    parser.add_argument("--no-validate", action="store_true", help="skip schema validation")
    parser.add_argument("--log-level", default="INFO")
    return parser


def default_data_dir(node_prefix: str) -> Path:
    """``var/kube-volumes/``, or a folder of its own there for a prefixed (second) emulator."""
    root = Path("var/kube-volumes")
    return root / node_prefix.strip("-") if node_prefix.strip("-") else root


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="ts=%(asctime)s level=%(levelname)s %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%S%z",
    )
    try:
        fleet = parse_fleet(args.fleet)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sizes: dict[str, int] = {}
    if args.image_sizes:
        try:
            with open(args.image_sizes) as handle:
                sizes = {str(k): int(v) for k, v in json.load(handle).items()}
        except (OSError, ValueError, AttributeError) as exc:
            print(f"error: --image-sizes {args.image_sizes}: {exc}", file=sys.stderr)
            return 2
    emulator = KubeEmulator(
        args.host,
        args.port,
        None,
        args.pull_delay,
        args.start_delay,
        args.tick,
        not args.no_validate,
        fleet=fleet,
        eviction_grace_s=args.eviction_grace,
        node_prefix=args.node_prefix,
        image_sizes=sizes,
        default_image_bytes=int(args.default_image_size * 1e9),
        pull_bandwidth_mbps=args.pull_bandwidth,
        registry_bandwidth_mbps=args.registry_bandwidth,
        registry_url=args.registry,
        keda_queue_url=args.keda_queue_url,
        keda_polling_interval_s=args.keda_polling_interval,
        data_dir=args.data_dir or default_data_dir(args.node_prefix),
        state_dir=args.state_dir,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        emulator.start()
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    if args.kubeconfig:
        path = emulator.write_kubeconfig(args.kubeconfig)
        log.info("kube-emulator kubeconfig=%s", path)
    log.info(
        'kube-emulator ready url=%s nodes=%s note="development stand-in, not a real cluster"',
        emulator.url,
        ",".join(s.name for s in emulator.node_specs),
    )
    while not stop.wait(0.5):
        pass
    emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
