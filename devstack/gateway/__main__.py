"""Run the development gateway (a stand-in for the production proxy) in the foreground.

    python -m devstack.gateway --port 8002 --auth-url http://127.0.0.1:8000/gateway/auth \\
        --kube-url http://127.0.0.1:16443

SIGTERM or Ctrl-C stops it with exit status 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from .proxy import AUTH_CACHE_S, COLD_START_TIMEOUT_S, DevGateway


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.gateway",
        description="Development gateway for the instances' addresses: a stand-in for the "
        "production proxy (not for production).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument("--auth-url", required=True, help="the console's /gateway/auth")
    parser.add_argument("--kube-url", required=True, help="the kube emulator")
    parser.add_argument(
        "--auth-cache", type=float, default=AUTH_CACHE_S, help="seconds a check's 2xx is kept"
    )
    parser.add_argument(
        "--cold-start-timeout",
        type=float,
        default=COLD_START_TIMEOUT_S,
        help="seconds an endpoint request is held while no replica is ready",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser


async def serve(gateway: DevGateway) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await gateway.open()
    try:
        await stop.wait()
    finally:
        await gateway.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="ts=%(asctime)s level=%(levelname)s %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%S%z",
    )
    gateway = DevGateway(
        auth_url=args.auth_url,
        kube_url=args.kube_url,
        host=args.host,
        port=args.port,
        auth_cache_s=args.auth_cache,
        cold_start_timeout_s=args.cold_start_timeout,
    )
    try:
        asyncio.run(serve(gateway))
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
