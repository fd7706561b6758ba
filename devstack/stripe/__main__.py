"""``python -m devstack.stripe --port 12111 --webhook-url URL --webhook-secret whsec_…``

Runs the local Stripe stand-in in the foreground until SIGTERM or Ctrl-C, logging one
``key=value`` line per request (and per webhook delivery attempt) to stdout."""

import argparse
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

from .pages import BANNER
from .server import DEFAULT_WEBHOOK_SECRET, StripeFake


def _value(value: Any) -> str:
    text = str(value)
    if text == "" or any(ch in text for ch in ' "='):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def log_line(entry: dict[str, Any]) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
    fields = " ".join(f"{key}={_value(value)}" for key, value in entry.items())
    sys.stdout.write(f"ts={stamp} service=stripe_fake {fields}\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.stripe", description=f"Local Stripe stand-in. {BANNER}"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=12111)
    parser.add_argument("--webhook-url", default=None)
    parser.add_argument("--webhook-secret", default=DEFAULT_WEBHOOK_SECRET)
    parser.add_argument("--api-key-prefix", default="sk_test_")
    parser.add_argument("--no-webhooks", action="store_true", help="record events, don't send")
    args = parser.parse_args(argv)

    fake = StripeFake(
        host=args.host,
        port=args.port,
        webhook_url=args.webhook_url,
        webhook_secret=args.webhook_secret,
        api_key_prefix=args.api_key_prefix,
        log=log_line,
    )
    fake.deliver_webhooks = not args.no_webhooks
    stopping = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    fake.start(poll_interval=0.5)
    log_line(
        {
            "kind": "started",
            "url": fake.url,
            "webhook_url": args.webhook_url or "-",
            "demo": "true",
            "note": BANNER,
        }
    )
    while not stopping.wait(0.5):
        pass
    fake.stop()
    log_line({"kind": "stopped"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
