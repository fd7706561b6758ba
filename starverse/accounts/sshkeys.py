"""Validation of OpenSSH public keys by reading their wire format (RFC 4253 §6.6, RFC 5656,
RFC 8709), so a key is accepted only if its blob really is a key of the type it claims."""

import base64
import binascii
import struct
from dataclasses import dataclass

from django.utils.translation import gettext as _

from starverse.core.errors import InvalidInput
from starverse.core.hostkeys import openssh_fingerprint

MIN_RSA_BITS = 2048
MAX_KEY_CHARS = 16_384
_ECDSA_BITS = {"nistp256": 256, "nistp384": 384, "nistp521": 521}
_SUPPORTED = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)


@dataclass(frozen=True)
class ParsedKey:
    key_type: str
    blob: bytes
    comment: str
    bits: int

    @property
    def fingerprint(self) -> str:
        return openssh_fingerprint(self.blob)

    @property
    def canonical(self) -> str:
        text = f"{self.key_type} {base64.b64encode(self.blob).decode()}"
        return f"{text} {self.comment}" if self.comment else text


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def string(self) -> bytes:
        if self.pos + 4 > len(self.data):
            raise ValueError("truncated")
        (length,) = struct.unpack(">I", self.data[self.pos : self.pos + 4])
        start, self.pos = self.pos + 4, self.pos + 4 + length
        if self.pos > len(self.data):
            raise ValueError("truncated")
        return self.data[start : self.pos]

    def done(self) -> bool:
        return self.pos == len(self.data)


def _mpint_bits(value: bytes) -> int:
    return int.from_bytes(value, "big").bit_length()


def parse_public_key(text: str) -> ParsedKey:
    """Parse one `type base64 [comment]` line; raise InvalidInput saying what is wrong."""
    text = text.strip()
    if not text:
        raise InvalidInput(
            _("Paste an OpenSSH public key (the contents of ~/.ssh/id_ed25519.pub).")
        )
    if len(text) > MAX_KEY_CHARS:
        raise InvalidInput(_("This key is too long to be an OpenSSH public key."))
    if "PRIVATE KEY" in text:
        raise InvalidInput(
            _("This is a private key. Paste the public key (the .pub file) instead.")
        )
    if "\n" in text:
        raise InvalidInput(_("Paste exactly one key, on one line."))
    parts = text.split(None, 2)
    if len(parts) < 2 or parts[0] not in _SUPPORTED:
        raise InvalidInput(
            _("Unsupported key format. Use ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa.")
        )
    key_type, encoded = parts[0], parts[1]
    comment = parts[2].strip() if len(parts) > 2 else ""
    try:
        blob = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(_("The key data is not valid base64.")) from None
    try:
        bits = _read_blob(key_type, blob)
    except ValueError:
        raise InvalidInput(_("The key data is corrupt or does not match its type.")) from None
    if key_type == "ssh-rsa" and bits < MIN_RSA_BITS:
        raise InvalidInput(
            _("RSA keys must have at least %(bits)d bits; this one has %(has)d.")
            % {"bits": MIN_RSA_BITS, "has": bits}
        )
    return ParsedKey(key_type=key_type, blob=blob, comment=comment[:200], bits=bits)


def _read_blob(key_type: str, blob: bytes) -> int:
    reader = _Reader(blob)
    if reader.string().decode("ascii", "replace") != key_type:
        raise ValueError("type mismatch")
    if key_type in ("ssh-ed25519", "sk-ssh-ed25519@openssh.com"):
        if len(reader.string()) != 32:
            raise ValueError("ed25519 key must be 32 bytes")
        bits = 256
    elif key_type == "ssh-rsa":
        exponent, modulus = reader.string(), reader.string()
        if not exponent or _mpint_bits(modulus) < 512:
            raise ValueError("bad rsa key")
        bits = _mpint_bits(modulus)
    else:
        curve = reader.string().decode("ascii", "replace")
        if curve not in _ECDSA_BITS or not key_type.split("@")[0].endswith(curve):
            raise ValueError("curve mismatch")
        point = reader.string()
        if not point or point[0] != 0x04:
            raise ValueError("bad point")
        bits = _ECDSA_BITS[curve]
    if key_type.startswith("sk-"):
        reader.string()  # application, e.g. "ssh:"
    if not reader.done():
        raise ValueError("trailing data")
    return bits
