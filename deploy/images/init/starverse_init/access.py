"""The access Secret, mounted read-only: the public keys that may log in as root, and the host
key the platform made for the instance. The kubelet updates a mounted Secret in place (a new
directory and one symlink swap), so reading its files again is enough to follow it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from starverse_init.config import HOST_KEY_NAME, Config
from starverse_init.files import read_text, write_atomic
from starverse_init.log import log


def wanted_keys(config: Config) -> str:
    """authorized_keys as the Secrets say it: the access Secret's keys and, on a cluster rank,
    the cluster's own key; no Secret file means no key (nobody logs in)."""
    keys = read_text(config.access_dir / "authorized_keys") or ""
    # a cluster rank also lets in its cluster's other ranks (starverse_init.cluster)
    keys += read_text(config.cluster_ssh_dir / "id_ed25519.pub") or ""
    lines = [line.strip() for line in keys.splitlines()]
    kept = [line for line in lines if line and not line.startswith("#")]
    return "".join(f"{line}\n" for line in kept)


def keys_sync(config: Config) -> bool:
    """Make root's authorized_keys what the Secret says (a key deleted in the console stops
    working once this has run); returns whether it changed anything."""
    wanted = wanted_keys(config)
    target = config.authorized_keys
    if read_text(target) == wanted and _mode(target) == 0o600:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(str(target.parent), 0o700)
    write_atomic(target, wanted, 0o600)
    log("keys.installed", count=len(wanted.splitlines()), path=target)
    return True


class KeyFollower:
    """Re-reads the Secret every `keys_poll_s` seconds (cheap: two small files)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.due = 0.0

    def tick(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        if now < self.due:
            return False
        self.due = now + self.config.keys_poll_s
        try:
            return keys_sync(self.config)
        except OSError as error:  # a half-swapped mount, a full disk: try again next tick
            log("keys.sync_failed", error=error)
            return False


def host_key_install(config: Config) -> Path:
    """sshd's host key, kept on the instance disk so it survives stop/start and a move to
    another node. The platform's key in the Secret is the one the console shows, so it wins:
    it is copied onto the disk on the first boot (and again should the disk copy ever differ).
    Without one (an image run outside the platform), a key is made on the disk once."""
    target = config.host_key
    target.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(str(target.parent), 0o700)
    given = read_text(config.access_dir / HOST_KEY_NAME)
    if given:
        if read_text(target) != given:
            write_atomic(target, given, 0o600)
            public = read_text(config.access_dir / f"{HOST_KEY_NAME}.pub") or _public_of(
                config, target
            )
            write_atomic(target.with_name(f"{HOST_KEY_NAME}.pub"), public, 0o644)
            log("hostkey.installed", source="secret", path=target)
    elif not target.exists():
        keygen = config.which("ssh-keygen") or "ssh-keygen"
        subprocess.run(
            [keygen, "-q", "-t", "ed25519", "-N", "", "-C", "starverse", "-f", str(target)],
            check=True,
            stdin=subprocess.DEVNULL,
        )
        log("hostkey.generated", path=target)
    os.chmod(str(target), 0o600)
    return target


def _public_of(config: Config, private: Path) -> str:
    keygen = config.which("ssh-keygen") or "ssh-keygen"
    result = subprocess.run(
        [keygen, "-y", "-f", str(private)], check=True, stdout=subprocess.PIPE, text=True
    )
    return result.stdout


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777
