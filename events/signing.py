"""How a delivery is signed, like Stripe's: `Starverse-Signature: t=<unix>,v1=<hex>`, the hex
an HMAC-SHA256 of "<t>.<body>" with the webhook's secret; during a rotation one v1= per valid
secret, so a receiver holding either verifies. `verify` is what docs/user-guide.md shows."""

import hashlib
import hmac
import secrets
import time

HEADER = "Starverse-Signature"
SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix, not a secret)
# How far a signature's time may be from the receiver's clock, in `verify`.
TOLERANCE_S = 300


def secret_new() -> str:
    return SECRET_PREFIX + secrets.token_hex(24)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def header_value(secrets_valid: list[str], timestamp: int, body: bytes) -> str:
    entries = [f"t={timestamp}"] + [f"v1={signature(s, timestamp, body)}" for s in secrets_valid]
    return ",".join(entries)


def verify(secret: str, header: str, body: bytes, *, now: float | None = None) -> bool:
    """Whether `header` signs `body` with `secret`, within TOLERANCE_S of now."""
    fields = [part.split("=", 1) for part in header.split(",") if "=" in part]
    stamps = [value for key, value in fields if key == "t"]
    if len(stamps) != 1 or not stamps[0].isdigit():
        return False
    if abs((now if now is not None else time.time()) - int(stamps[0])) > TOLERANCE_S:
        return False
    expected = signature(secret, int(stamps[0]), body)
    return any(hmac.compare_digest(expected, value) for key, value in fields if key == "v1")
