"""Time-based one-time passwords (RFC 6238, through pyotp) and recovery codes: the arithmetic
only, no database. Codes are 6 digits for 30-second steps, as every authenticator app makes
them by default; the step before and after the current one are accepted too, for clock drift
and typing time."""

import hashlib
import re
import secrets
import time

import pyotp
import segno

ISSUER = "Starverse"
DIGITS = 6
STEP_S = 30
DRIFT_STEPS = 1
RECOVERY_CODE_COUNT = 10
# Crockford's base32: no i, l, o or u, so a code read off paper is typed back right; 12 of
# them are 60 random bits, grouped by four for reading.
_RECOVERY_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_RECOVERY_LENGTH = 12
_LOOKALIKES = str.maketrans({"o": "0", "i": "1", "l": "1"})
_CODE = re.compile(rf"\d{{{DIGITS}}}")


def secret_generate() -> str:
    """A new shared secret: 32 base32 characters (160 bits, as RFC 4226 recommends)."""
    return pyotp.random_base32()


def otpauth_uri(secret: str, account: str) -> str:
    """What the QR code holds: `otpauth://totp/Starverse:<account>?secret=…&issuer=Starverse`."""
    return pyotp.TOTP(secret).provisioning_uri(name=account, issuer_name=ISSUER)


def qr_svg(uri: str) -> str:
    """The QR code of `uri` as an inline <svg> element (no image library, no data URI)."""
    return str(
        segno.make(uri, error="m").svg_inline(scale=4, border=2, light="#fff", omitsize=True)
    )


def secret_for_typing(secret: str) -> str:
    """The secret in groups of four, for apps that take it typed in instead of scanned."""
    return " ".join(secret[i : i + 4] for i in range(0, len(secret), 4))


def looks_like_totp(code: str) -> bool:
    """True for six digits (spaces allowed, as some apps show `123 456`)."""
    return bool(_CODE.fullmatch(code.replace(" ", "")))


def totp_step_of(secret: str, code: str, now: float | None = None) -> int | None:
    """The time step whose code `code` is, within the drift allowed around `now`; else None."""
    code = code.replace(" ", "")
    if not _CODE.fullmatch(code):
        return None
    current = int((time.time() if now is None else now) // STEP_S)
    generator = pyotp.TOTP(secret, digits=DIGITS, interval=STEP_S)
    for step in range(current - DRIFT_STEPS, current + DRIFT_STEPS + 1):
        if secrets.compare_digest(generator.generate_otp(step), code):
            return step
    return None


def recovery_code_generate() -> str:
    """A fresh recovery code as shown to the user: `xxxx-xxxx-xxxx`."""
    raw = "".join(secrets.choice(_RECOVERY_ALPHABET) for _ in range(_RECOVERY_LENGTH))
    return "-".join(raw[i : i + 4] for i in range(0, _RECOVERY_LENGTH, 4))


def recovery_code_hash(code: str) -> str:
    """The stored form: SHA-256 of the code without dashes or spaces, in lower case, with the
    letters that look like digits read as those digits."""
    normal = re.sub(r"[\s-]", "", code).lower().translate(_LOOKALIKES)
    return hashlib.sha256(normal.encode()).hexdigest()
