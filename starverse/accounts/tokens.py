"""Token format: a type prefix (`sv_` for API tokens, `svn_` for node agents) + 30 random
base62 characters + a 6-character CRC32 checksum.

The checksum lets a mistyped or truncated token be refused without touching the database
(as GitHub's tokens do); the database only ever sees the SHA-256 of a well-formed token."""

import hashlib
import secrets
import zlib

from starverse.core.ids import ALPHABET

TOKEN_PREFIX = "sv_"  # noqa: S105 - a public prefix, not a secret
NODE_TOKEN_PREFIX = "svn_"  # noqa: S105 - a public prefix, not a secret
_BODY = 30
_CHECK = 6
TOKEN_LENGTH = len(TOKEN_PREFIX) + _BODY + _CHECK


def _base62(number: int, width: int) -> str:
    chars = []
    for _ in range(width):
        number, rest = divmod(number, 62)
        chars.append(ALPHABET[rest])
    return "".join(reversed(chars))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode()), _CHECK)


def token_generate(prefix: str = TOKEN_PREFIX) -> str:
    body = "".join(secrets.choice(ALPHABET) for _ in range(_BODY))
    return f"{prefix}{body}{_checksum(body)}"


def token_is_well_formed(token: str, prefix: str = TOKEN_PREFIX) -> bool:
    if len(token) != len(prefix) + _BODY + _CHECK or not token.startswith(prefix):
        return False
    body, check = token[len(prefix) : -_CHECK], token[-_CHECK:]
    if any(c not in ALPHABET for c in body):
        return False
    return secrets.compare_digest(_checksum(body), check)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_display_prefix(token: str) -> str:
    return token[: token.index("_") + 7]
