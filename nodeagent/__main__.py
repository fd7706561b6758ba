"""Command line of the node agent.

    python -m nodeagent --platform-url URL --node NAME (--token-file PATH | --token T)
                        [--bootstrap-token-file PATH]
                        [--interval 15] [--source nvml|sim|fixture:PATH] [--once]
    python -m nodeagent record --out FILE.json [--events-seconds N] [--redact]

Settings fall back on the environment: NODEAGENT_PLATFORM_URL, NODEAGENT_NODE,
NODEAGENT_TOKEN_FILE, NODEAGENT_TOKEN, NODEAGENT_BOOTSTRAP_TOKEN_FILE, NODEAGENT_INTERVAL,
NODEAGENT_SOURCE, NODEAGENT_KUBE_URL.

With --bootstrap-token-file, --token-file is where the agent keeps the node token it gets by
registering (nodeagent.credentials): it need not exist on the first start.

Exit status: 0 (stopped, or --once delivered), 1 (--once not delivered), 2 (bad settings, or
NVML unavailable: no driver on this machine).
"""

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nodeagent import AGENT_VERSION
from nodeagent.credentials import NodeCredentials, registration_spec
from nodeagent.exporter import GpuCollector, serve
from nodeagent.nvml import NvmlUnavailable
from nodeagent.source import GpuSource

DEFAULT_KUBE_URL = "http://127.0.0.1:16443"

log = logging.getLogger("nodeagent")


class UsageError(Exception):
    pass


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value else default


def agent_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nodeagent",
        description="Starverse node agent: reports this node's GPUs (NVML) to the platform. "
        "`python -m nodeagent record --out FILE` records an NVML fixture instead.",
    )
    parser.add_argument("--platform-url", default=_env("NODEAGENT_PLATFORM_URL"))
    parser.add_argument("--node", default=_env("NODEAGENT_NODE"), help="this node's name")
    parser.add_argument(
        "--token-file", default=_env("NODEAGENT_TOKEN_FILE"), help="file holding the node token"
    )
    parser.add_argument("--token", default=_env("NODEAGENT_TOKEN"), help="the node token")
    parser.add_argument(
        "--bootstrap-token-file",
        default=_env("NODEAGENT_BOOTSTRAP_TOKEN_FILE"),
        help="file holding the fleet's bootstrap token: register this node (again, when its "
        "token is refused) and keep its node token in --token-file",
    )
    parser.add_argument(
        "--region",
        default=_env("NODEAGENT_REGION", ""),
        help="the region (cluster) this node belongs to, sent when it registers (default: the "
        "platform's default region)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=_env("NODEAGENT_INTERVAL", "15"),
        help="seconds between samples (default 15)",
    )
    parser.add_argument(
        "--source",
        default=_env("NODEAGENT_SOURCE", "nvml"),
        help="nvml (default), sim (simulated GPUs following the cluster's pods), "
        "or fixture:PATH (replay a recorded NVML fixture)",
    )
    parser.add_argument("--once", action="store_true", help="sample and report once, then exit")
    parser.add_argument(
        "--kube-url",
        default=_env("NODEAGENT_KUBE_URL"),
        help=f"Kubernetes API for --source sim (default: in-cluster, else {DEFAULT_KUBE_URL})",
    )
    parser.add_argument("--kube-token-file", default=_env("NODEAGENT_KUBE_TOKEN_FILE"))
    parser.add_argument("--kube-ca-file", default=_env("NODEAGENT_KUBE_CA_FILE"))
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=_env("NODEAGENT_METRICS_PORT", "0"),
        help="serve the GPUs' metrics for Prometheus under dcgm-exporter's names on this port "
        "(dcgm-exporter's is 9400; default 0: off)",
    )
    parser.add_argument("--buffer", type=int, default=240, help="reports kept while unreachable")
    parser.add_argument("--timeout", type=float, default=10.0, help="HTTP timeout, seconds")
    parser.add_argument("--log-level", default=_env("NODEAGENT_LOG_LEVEL", "info"))
    parser.add_argument("--version", action="version", version=f"nodeagent {AGENT_VERSION}")
    return parser


def record_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nodeagent record",
        description="Record an NVML fixture from this machine's GPUs (needs the NVIDIA driver).",
    )
    parser.add_argument("--out", required=True, help="fixture file to write (JSON)")
    parser.add_argument(
        "--events-seconds",
        type=float,
        default=0.0,
        help="also wait this long for XID events and record them (default 0)",
    )
    parser.add_argument("--description", default="", help="what this machine is, in a sentence")
    parser.add_argument(
        "--redact", action="store_true", help="replace GPU UUIDs and serial numbers by stand-ins"
    )
    parser.add_argument("--log-level", default="warning")
    return parser


def _logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def token_provider(args: argparse.Namespace) -> str | Callable[[], str]:
    if args.token_file:
        path = Path(args.token_file)

        def read() -> str:
            token = path.read_text(encoding="utf-8").strip()
            if not token:
                raise OSError(f"{path} is empty")
            return token

        try:
            read()
        except OSError as exc:
            raise UsageError(f"cannot read the node token from {path}: {exc}") from None
        return read
    if args.token:
        return str(args.token).strip()
    raise UsageError("no node token: give --token-file PATH or --token T (or NODEAGENT_TOKEN)")


def bootstrap_credentials(args: argparse.Namespace, source: GpuSource) -> NodeCredentials | None:
    """With a bootstrap token, the node's own credentials (registered on first use, kept in
    --token-file); None without (the token is given)."""
    if not args.bootstrap_token_file:
        return None
    if not args.token_file:
        raise UsageError("--bootstrap-token-file needs --token-file: where to keep the node token")
    if not Path(args.bootstrap_token_file).is_file():
        raise UsageError(f"no bootstrap token file at {args.bootstrap_token_file}")
    return NodeCredentials(
        args.platform_url,
        args.node,
        args.token_file,
        args.bootstrap_token_file,
        lambda: registration_spec(source.inventory()),
        timeout=args.timeout,
        region=args.region or "",
    )


def open_source(args: argparse.Namespace) -> GpuSource:
    """Raises NvmlUnavailable (nvml) or UsageError."""
    spec = str(args.source)
    if spec == "nvml":
        from nodeagent.nvml import NvmlSource

        return NvmlSource()
    if spec.startswith("fixture:"):
        from nodeagent.fixture import open_fixture_source

        path = spec.removeprefix("fixture:")
        try:
            return open_fixture_source(path)
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot replay fixture {path}: {exc}") from None
    if spec == "sim":
        from nodeagent.sim import KubeClient, SimSource

        try:
            if args.kube_url or not os.environ.get("KUBERNETES_SERVICE_HOST"):
                token = None
                if args.kube_token_file:
                    token = Path(args.kube_token_file).read_text(encoding="utf-8").strip()
                kube = KubeClient(
                    args.kube_url or DEFAULT_KUBE_URL, token=token, ca_file=args.kube_ca_file
                )
            else:
                kube = KubeClient.in_cluster()
        except (OSError, ValueError, KeyError) as exc:
            raise UsageError(f"--source sim: {exc}") from None
        return SimSource(args.node, kube)
    raise UsageError(f"unknown --source {spec!r}: nvml, sim or fixture:PATH")


def run_agent(argv: Sequence[str]) -> int:
    args = agent_parser().parse_args(argv)
    _logging(args.log_level)
    from nodeagent.agent import Agent
    from nodeagent.report import Reporter

    try:
        _settings_check(args)
        given = None if args.bootstrap_token_file else token_provider(args)
        source = open_source(args)
        try:
            credentials = bootstrap_credentials(args, source)
            reporter = Reporter(
                args.platform_url,
                args.node,
                credentials.token if credentials else given or "",
                timeout=args.timeout,
                buffer_size=args.buffer,
                on_refused=credentials.refused if credentials else None,
            )
        except (UsageError, ValueError):
            source.close()
            raise
    except (UsageError, ValueError) as exc:
        print(f"nodeagent: {exc}", file=sys.stderr)
        return 2
    except NvmlUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2

    exporter = None
    if args.metrics_port:
        exporter = GpuCollector(args.node)
        serve(exporter, args.metrics_port)
    agent = Agent(source, reporter, interval=args.interval, exporter=exporter)
    try:
        if args.once:
            delivered = agent.run_once()
            if not delivered:
                log.error("the report was not delivered to %s", reporter.url)
            return 0 if delivered else 1
        log.info(
            "nodeagent %s: node %s, source %s, %d GPU(s), reporting to %s every %g s",
            AGENT_VERSION,
            args.node,
            args.source,
            len(source.inventory()),
            reporter.url,
            args.interval,
        )
        agent.run(_stop_on_signal())
        return 0
    finally:
        source.close()


def _settings_check(args: argparse.Namespace) -> None:
    """The settings the agent cannot run without, checked before it opens its GPU source."""
    if not args.platform_url:
        raise UsageError("no platform URL: give --platform-url (or NODEAGENT_PLATFORM_URL)")
    if not args.node:
        raise UsageError("no node name: give --node (or NODEAGENT_NODE)")
    if args.interval <= 0:
        raise UsageError("--interval must be positive")


def _stop_on_signal() -> threading.Event:
    """An event that SIGTERM or SIGINT sets: the agent's loop ends at its next turn, and
    run_agent closes the GPU source and returns 0."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def run_record(argv: Sequence[str]) -> int:
    args = record_parser().parse_args(argv)
    _logging(args.log_level)
    from nodeagent.record import record

    try:
        fixture, problems = record(
            args.out,
            events_seconds=args.events_seconds,
            description=args.description,
            redact=args.redact,
        )
    except NvmlUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    devices = fixture["devices"]
    unsupported = sorted(
        {
            key
            for entry in devices
            for key, value in entry.items()
            if isinstance(value, dict) and value.get("error")
        }
    )
    print(f"wrote {args.out}: {fixture['description']}")
    print(f"  {len(devices)} GPU(s), {len(fixture['events'])} XID event(s) recorded")
    if unsupported:
        print(f"  calls that answered an error: {', '.join(unsupported)}")
    if problems:
        print("the recording does NOT replay as read live:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print("  replayed through the fixture layer: identical to the live read")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["record"]:
        return run_record(argv[1:])
    return run_agent(argv)


if __name__ == "__main__":
    sys.exit(main())
