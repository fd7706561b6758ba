"""key=value lines on stderr, which the container runtime keeps as the pod's log."""

from __future__ import annotations

import sys
import time


def log(event: str, **fields: object) -> None:
    parts = [time.strftime("%Y-%m-%dT%H:%M:%S"), "starverse-init", event]
    parts += [f"{key}={_value(value)}" for key, value in fields.items()]
    print(" ".join(parts), file=sys.stderr, flush=True)


def _value(value: object) -> str:
    text = str(value)
    return repr(text) if not text or any(c.isspace() or c in "\"'=" for c in text) else text
