"""SSH host keys the platform makes for its instances, and OpenSSH fingerprints.

A host key is generated in-process (no `ssh-keygen` subprocess in the web tier or the worker)
as an ed25519 pair in OpenSSH's own formats, so sshd reads the private half as it is and the
fingerprint is what `ssh-keygen -l` and the first-connection prompt print."""

import base64
import hashlib
from dataclasses import dataclass
from functools import lru_cache

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def openssh_fingerprint(blob: bytes) -> str:
    """`SHA256:` and the unpadded base64 of the SHA-256 of a public key's wire-format blob."""
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


@dataclass(frozen=True)
class HostKey:
    private_openssh: str  # "-----BEGIN OPENSSH PRIVATE KEY-----" …, unencrypted (sshd reads it)
    public_openssh: str  # "ssh-ed25519 AAAA…"
    fingerprint: str

    def __repr__(self) -> str:  # never print the private half into a log or a traceback
        return f"HostKey({self.public_openssh!r}, {self.fingerprint!r})"


def host_key_generate() -> HostKey:
    """A fresh ed25519 host key pair."""
    private = Ed25519PrivateKey.generate()
    private_text = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    return host_key_from_private(private_text)


# Each rank of a cluster renders every rank's public host key into the cluster's known_hosts
# (clusters.pods), so a 128-node start derives them 128 times each: a worker keeps those it
# derived (a key never changes; HostKey is frozen).
@lru_cache(maxsize=4096)
def host_key_from_private(private_openssh: str) -> HostKey:
    """The pair (and its fingerprint) of a stored OpenSSH private key."""
    private = serialization.load_ssh_private_key(private_openssh.encode(), password=None)
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    blob = base64.b64decode(public.split()[1])
    return HostKey(
        private_openssh=private_openssh,
        public_openssh=public.decode(),
        fingerprint=openssh_fingerprint(blob),
    )
