"""`starverse ssh`: connect with the instance's host key pinned, never trusted on first use.

The API gives each running instance's SSH address and its host key's fingerprint
(`ssh.host_key_fingerprint`, `SHA256:…` as `ssh-keygen -l` prints it), over the authenticated
API. OpenSSH cannot check a fingerprint by itself, only a key in a known_hosts file, so: the key
the address serves is read with `ssh-keyscan`, kept only if its fingerprint is the API's, and
written to the CLI's own known_hosts (in the config directory); ssh then runs with that file and
`StrictHostKeyChecking=yes`. A key that does not match is refused before ssh runs. An entry
already pinned for the address with the API's fingerprint is used without scanning again; one
with another fingerprint (the port now belongs to another instance) is replaced only by a key
that matches."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

KEYSCAN_TIMEOUT_S = 10


class HostKeyError(Exception):
    """The host's key could not be read, or is not the one the API names."""


def fingerprint(key_base64: str) -> str:
    """OpenSSH's SHA256 fingerprint of a public key's base64 blob."""
    try:
        blob = base64.b64decode(key_base64, validate=True)
    except (binascii.Error, ValueError) as error:
        raise HostKeyError(f"not an SSH public key: {error}") from error
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def host_name(host: str, port: int) -> str:
    """How known_hosts names a host: `host` on port 22, `[host]:port` elsewhere."""
    return host if port == 22 else f"[{host}]:{port}"


def _entries(text: str) -> list[tuple[str, str, str]]:
    """(names, key type, key) of each known_hosts line (comments and markers skipped)."""
    found = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not line.startswith(("#", "@")):
            found.append((parts[0], parts[1], parts[2]))
    return found


def keyscan(host: str, port: int) -> list[tuple[str, str]]:
    """(key type, key) pairs the address serves, read by `ssh-keyscan`."""
    program = shutil.which(os.environ.get("STARVERSE_SSH_KEYSCAN", "ssh-keyscan"))
    if not program:
        raise HostKeyError("ssh-keyscan is not installed (it comes with the OpenSSH client)")
    done = subprocess.run(  # noqa: S603 - fixed program, arguments from the API as separate argv
        [program, "-T", str(KEYSCAN_TIMEOUT_S), "-p", str(port), host],
        capture_output=True,
        text=True,
        timeout=KEYSCAN_TIMEOUT_S * 3,
        check=False,
    )
    keys = [(kind, key) for _names, kind, key in _entries(done.stdout)]
    if not keys:
        reason = done.stderr.strip().splitlines()[-1:] or ["no answer"]
        raise HostKeyError(f"cannot read the host key of {host}:{port}: {reason[0]}")
    return keys


def pin(
    known_hosts: Path,
    host: str,
    port: int,
    expected: str,
    scan: Callable[[str, int], list[tuple[str, str]]] = keyscan,
) -> str:
    """Make `known_hosts` hold exactly the key of `host:port` whose fingerprint is `expected`;
    returns the line written (or found)."""
    name = host_name(host, port)
    text = known_hosts.read_text(encoding="utf-8") if known_hosts.exists() else ""
    for names, kind, key in _entries(text):
        if name in names.split(",") and fingerprint(key) == expected:
            return f"{names} {kind} {key}"
    matching = [(kind, key) for kind, key in scan(host, port) if fingerprint(key) == expected]
    if not matching:
        raise HostKeyError(
            f"the host key served at {name} is not the instance's ({expected}): refusing to connect"
        )
    kind, key = matching[0]
    kept = [
        line
        for line in text.splitlines()
        if not (line.split() and name in line.split()[0].split(","))
    ]
    entry = f"{name} {kind} {key}"
    known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    known_hosts.write_text("\n".join([*kept, entry]) + "\n", encoding="utf-8")
    os.chmod(known_hosts, 0o600)
    return entry


def ssh_options(
    *,
    port: int,
    known_hosts: Path,
    identity: str | None = None,
    options: Sequence[str] = (),
) -> list[str]:
    """ssh's options for an instance: the pinned known_hosts only, strict checking, its port
    (`ssh`, and the `-e` command of rsync, use them alike)."""
    argv = [
        "-p",
        str(port),
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "GlobalKnownHostsFile=/dev/null" if os.name != "nt" else "GlobalKnownHostsFile=NUL",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "UpdateHostKeys=no",
    ]
    if identity:
        argv += ["-i", identity, "-o", "IdentitiesOnly=yes"]
    for option in options:
        argv += ["-o", option]
    return argv


def ssh_argv(
    *,
    host: str,
    port: int,
    user: str,
    known_hosts: Path,
    identity: str | None = None,
    options: Sequence[str] = (),
    command: Sequence[str] = (),
    program: str = "ssh",
) -> list[str]:
    """The ssh command line: the pinned known_hosts only, strict checking, the instance's
    port and user, then the remote command (if any)."""
    argv = [
        program,
        *ssh_options(port=port, known_hosts=known_hosts, identity=identity, options=options),
    ]
    # `--` before the destination ends ssh's options for good: a remote command's own flags
    # (`ls -la`) are not read as ssh's, which ssh would do after a destination.
    return [*argv, "--", f"{user}@{host}", *command]


def run_ssh(argv: list[str]) -> int:
    """Replace this process with ssh (POSIX), so the terminal, signals and the exit status are
    ssh's own; on Windows, run it and hand back its status."""
    program = shutil.which(argv[0])
    if not program:
        raise HostKeyError(f"{argv[0]} is not installed (the OpenSSH client)")
    if os.name == "nt":
        return subprocess.call([program, *argv[1:]])  # noqa: S603
    os.execv(program, [program, *argv[1:]])  # noqa: S606
    return 0  # not reached
