"""`make run`'s check of its ports before it starts anything (README "Set up", the ports table).

Each argument names one port, the service that listens on it and the variable that moves it:

    python -m devstack.ports 'the console=PORT=8000' 'the web terminal=TERMINAL_PORT=8001' ...

Every port is tried on 127.0.0.1 as the services bind it; for each one that is taken (or named
twice) a line says which service wanted it, what holds it when that can be read (Linux /proc),
and which variable moves it. Exit status 1 when any is taken, so `make run` stops before it has
started a process that would bind its port and die some seconds later.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
LISTEN = "0A"  # the TCP state LISTEN in /proc/net/tcp
COMMAND_SHOWN = 120  # characters of the holder's command line


@dataclass(frozen=True)
class Wanted:
    """One port a service of `make run` binds, and the variable that chooses it."""

    service: str
    variable: str
    port: int


def parse(argument: str) -> Wanted:
    service, variable, port = argument.rsplit("=", 2)
    return Wanted(service, variable, int(port))


def free(port: int) -> bool:
    """Whether 127.0.0.1:`port` can be bound as the services bind it (SO_REUSEADDR, as gunicorn,
    uvicorn and http.server do: a closed connection's TIME_WAIT does not count as taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def holder(port: int) -> str | None:
    """What listens on `port`: 'pid N: its command line', read from /proc (Linux, and only the
    processes this user may read), else None."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for proc in PROC.iterdir():
        if not proc.name.isdigit():
            continue
        try:
            links = {os.readlink(fd) for fd in (proc / "fd").iterdir()}
            if links & wanted:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").strip()
                text = command.decode(errors="replace") or (proc / "comm").read_text().strip()
                return f"pid {proc.name}: {_shortened(text)}"
        except OSError:
            continue
    return None


def _shortened(text: str, limit: int = COMMAND_SHOWN) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def problems(wanted: list[Wanted]) -> list[str]:
    """One line per port that `make run` could not bind; none when all are free."""
    lines = []
    seen: dict[int, Wanted] = {}
    for each in wanted:
        first = seen.setdefault(each.port, each)
        if first is not each:
            lines.append(
                f"port {each.port} is wanted twice: by {first.service} ({first.variable}) "
                f"and by {each.service} ({each.variable}); set one of them to another port."
            )
            continue
        if free(each.port):
            continue
        by = holder(each.port)
        taken = f"taken by {by}" if by else "taken by another program"
        lines.append(
            f"port {each.port} for {each.service} is {taken}; "
            f"set {each.variable} to move it (e.g. {each.variable}={each.port + 100} make run)."
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.ports", description=__doc__)
    parser.add_argument("wanted", nargs="+", type=parse, help="SERVICE=VARIABLE=PORT")
    found = problems(parser.parse_args(argv).wanted)
    for line in found:
        print(f"make run: {line}", file=sys.stderr)
    if found:
        print("make run: nothing was started.", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
