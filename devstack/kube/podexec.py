"""``pods/{name}/exec`` of the Kubernetes API emulator (a development stand-in), over WebSocket
with the apiserver's channel protocols: ``v5.channel.k8s.io`` (and v4, v3, v2, the first
``channel.k8s.io``) with binary frames whose first byte is the channel, and the base64
variants (``v4.base64.channel.k8s.io``, ``base64.channel.k8s.io``) with text frames whose first
character is the channel's digit. Channels: 0 stdin, 1 stdout, 2 stderr, 3 the final status
(a JSON Status from v4 on), 4 resize (``{"Width": …, "Height": …}``), 255 (v5) stdin closed.

What runs is :class:`.shell.SimulatedShell`. A shell (``sh``, ``bash`` …) with stdin and a TTY
is the interactive shell, whatever ``-c`` script it was given (terminals send one that picks a
login shell); any other command runs once as a command line. Every session is listed in
:class:`ExecRegistry` while its connection is open, so a test can see that a client's going
away ended it."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import posixpath
import threading
import time
from dataclasses import dataclass
from typing import Any

from . import errors as err
from .shell import SHELLS, SimulatedShell
from .websocket import BINARY, TEXT, Closed, ProtocolError, ServerSocket

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE_STDIN = 0, 1, 2, 3, 4, 255
BINARY_PROTOCOLS = (
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
)
BASE64_PROTOCOLS = ("v4.base64.channel.k8s.io", "base64.channel.k8s.io")


@dataclass(frozen=True)
class ExecSession:
    """An exec session while its connection is open."""

    id: int
    namespace: str
    pod: str
    container: str
    command: tuple[str, ...]
    user: str
    protocol: str
    started: float


class ExecRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._open: dict[int, ExecSession] = {}
        self.total = 0

    def add(self, **fields: Any) -> ExecSession:
        with self._lock:
            session = ExecSession(id=next(self._ids), started=time.monotonic(), **fields)
            self._open[session.id] = session
            self.total += 1
            return session

    def remove(self, session: ExecSession) -> None:
        with self._lock:
            self._open.pop(session.id, None)

    def sessions(self) -> list[ExecSession]:
        with self._lock:
            return sorted(self._open.values(), key=lambda s: s.id)


def negotiate(offered: str) -> str | None:
    """The first protocol the client offers that the emulator speaks; "" when it offers none
    (the first channel protocol, unnamed); None when it speaks none of them."""
    names = [name.strip() for name in offered.split(",") if name.strip()]
    if not names:
        return ""
    return next((n for n in names if n in BINARY_PROTOCOLS + BASE64_PROTOCOLS), None)


def exec_container(pod: dict[str, Any], container: str | None) -> str:
    """The container to run in, checked as the apiserver and kubelet check it (400 otherwise)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    names = [str(c.get("name")) for c in spec.get("containers") or []]
    if container is None:
        if len(names) != 1:
            raise err.bad_request(
                f"a container name must be specified for pod {meta['name']}, choose one of: "
                f"[{' '.join(names)}]"
            )
        container = names[0]
    if container not in names:
        raise err.bad_request(f"container {container} is not valid for pod {meta['name']}")
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        raise err.bad_request(
            f"cannot exec into a container in a completed pod; current phase is {phase}"
        )
    statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("containerStatuses") or []}
    if "running" not in ((statuses.get(container) or {}).get("state") or {}):
        raise err.bad_request(f'unable to upgrade connection: container not found ("{container}")')
    return container


def interactive(command: list[str], *, stdin: bool, tty: bool) -> bool:
    return bool(command) and posixpath.basename(command[0]) in SHELLS and stdin and tty


def command_line(command: list[str]) -> str:
    """The line a one-off command runs: a shell's -c script, or the words themselves."""
    if command and posixpath.basename(command[0]) in SHELLS and "-c" in command[1:-1]:
        return command[command.index("-c") + 1]
    return " ".join(command)


class Channels:
    """Channel frames of the negotiated protocol over a server WebSocket."""

    def __init__(self, ws: ServerSocket, protocol: str) -> None:
        self.ws, self.protocol = ws, protocol
        self.base64 = protocol in BASE64_PROTOCOLS

    def send(self, channel: int, data: bytes) -> None:
        if self.base64:
            self.ws.send(TEXT, str(channel).encode() + base64.b64encode(data))
        else:
            self.ws.send(BINARY, bytes([channel]) + data)

    def receive(self) -> tuple[int, bytes]:
        opcode, payload = self.ws.receive()
        if not payload:
            return -1, b""
        if self.base64:
            if opcode != TEXT or not payload[:1].isdigit():
                raise ProtocolError("base64 channel frames are text with a channel digit")
            return payload[0] - ord("0"), base64.b64decode(payload[1:])
        return payload[0], payload[1:]

    def status(self, code: int, command: list[str]) -> None:
        """The final status on the error channel: a JSON Status from v4 on, else text."""
        versioned = self.protocol.startswith(("v4.", "v5."))
        if code == 0:
            body = {"metadata": {}, "status": "Success"} if versioned else None
        else:
            message = (
                f"command terminated with non-zero exit code: error executing command "
                f"{json.dumps(command)}, exit code {code}"
            )
            body = {
                "metadata": {},
                "status": "Failure",
                "message": message,
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
            }
            if not versioned:
                self.send(ERROR, message.encode())
                return
        if body is not None:
            self.send(ERROR, json.dumps(body).encode())


def serve(channels: Channels, shell: SimulatedShell, command: list[str], *, stdin: bool) -> None:
    """Run the session until the shell exits or the client goes away; the final status and the
    closing handshake when the shell exits."""
    if not interactive(command, stdin=stdin, tty=shell.tty):
        shell.exit_code = None
        code = shell.run(command_line(command))
        while shell.hung:  # a program that never ends: until the client goes away (Closed)
            channels.receive()
        shell.exit_code = shell.exit_code if shell.exit_code is not None else code
    else:
        shell.start()
        while shell.exit_code is None:
            channel, data = channels.receive()
            if channel == STDIN:
                shell.feed(data)
            elif channel == RESIZE:
                with contextlib.suppress(ValueError, TypeError, AttributeError):
                    size = json.loads(data)
                    shell.resize(int(size.get("Width", 0)), int(size.get("Height", 0)))
            elif channel == CLOSE_STDIN and data[:1] == bytes([STDIN]):
                shell.end_of_input()
    channels.status(shell.exit_code or 0, command)
    channels.ws.close(1000)


__all__ = ["Closed", "ExecRegistry", "ExecSession", "ProtocolError", "negotiate", "serve"]
