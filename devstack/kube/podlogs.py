"""Containers' output as the Kubernetes API emulator's kubelets keep it (a development
stand-in): one bounded log per container instance (its ``containerID``), the latest
``MAX_LINES`` lines and ``MAX_BYTES`` bytes, for ``pods/{name}/log`` (:mod:`.server`) to serve,
follow included. A kubelet keeps the current and the previous instance of a container; so does
:class:`LogBook`, by pod uid and container name."""

from __future__ import annotations

import datetime as dt
import itertools
import threading
from collections import deque
from dataclasses import dataclass, field

MAX_LINES = 10_000
MAX_BYTES = 5 * 1024 * 1024
KEPT_INSTANCES = 2  # the current container and the previous one, as the kubelet keeps them


@dataclass(frozen=True)
class LogLine:
    at: dt.datetime  # when the container wrote it (UTC)
    text: str  # without its newline

    def render(self, timestamps: bool) -> bytes:
        line = f"{self.text}\n"
        return f"{rfc3339_nano(self.at)} {line}".encode() if timestamps else line.encode()


@dataclass
class ContainerLog:
    """One container instance's output; ``serial`` counts every line ever written, so a
    follower knows where it stands after older lines were dropped."""

    lines: deque[LogLine] = field(default_factory=deque)
    size: int = 0
    serial: int = 0
    finished: bool = False

    def since(self, serial: int) -> list[LogLine]:
        """The lines written after the first ``serial`` (those still kept)."""
        missing = min(self.serial - serial, len(self.lines))
        if missing <= 0:
            return []
        return list(itertools.islice(reversed(self.lines), missing))[::-1]


def rfc3339_nano(moment: dt.datetime) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: fractional seconds without trailing zeros."""
    fraction = f"{moment.microsecond:06d}".rstrip("0")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


class LogBook:
    """Every kept container log, and the condition a follower waits on for new lines."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self._logs: dict[str, ContainerLog] = {}  # containerID -> its log
        self._instances: dict[tuple[str, str], list[str]] = {}  # (pod uid, name) -> ids
        self.closed = False

    def start(self, pod_uid: str, container: str, container_id: str) -> None:
        """A container instance starts (a second call for the same instance is a no-op)."""
        with self.changed:
            if container_id in self._logs:
                return
            self._logs[container_id] = ContainerLog()
            ids = self._instances.setdefault((pod_uid, container), [])
            ids.append(container_id)
            while len(ids) > KEPT_INSTANCES:
                self._logs.pop(ids.pop(0), None)
            self.changed.notify_all()

    def write(self, container_id: str, text: str) -> None:
        with self.changed:
            log = self._logs.get(container_id)
            if log is None or log.finished:
                return
            stamp = dt.datetime.now(dt.UTC)
            for part in text.split("\n"):
                line = LogLine(stamp, part)
                log.lines.append(line)
                log.size += len(part) + 1
                log.serial += 1
            while log.lines and (len(log.lines) > MAX_LINES or log.size > MAX_BYTES):
                log.size -= len(log.lines.popleft().text) + 1
            self.changed.notify_all()

    def finish(self, container_id: str) -> None:
        """The instance exited: it writes no more and its followers' streams end."""
        with self.changed:
            log = self._logs.get(container_id)
            if log is not None and not log.finished:
                log.finished = True
                self.changed.notify_all()

    def get(self, container_id: str) -> ContainerLog | None:
        with self.changed:
            return self._logs.get(container_id)

    def read(self, log: ContainerLog) -> tuple[list[LogLine], int, bool]:
        """Everything kept of an instance's output, where it stands, and whether it ended."""
        with self.changed:
            return list(log.lines), log.serial, log.finished or self.closed

    def wait_after(
        self, log: ContainerLog, serial: int, timeout: float
    ) -> tuple[list[LogLine], int, bool]:
        """The lines written after ``serial`` (waiting up to ``timeout`` seconds for some when
        there are none yet), where the log stands then, and whether it ended."""
        with self.changed:
            if log.serial == serial and not log.finished and not self.closed:
                self.changed.wait(timeout)
            return log.since(serial), log.serial, log.finished or self.closed

    def tail(self, container_id: str, count: int) -> list[str]:
        """The last ``count`` lines of an instance's output."""
        with self.changed:
            log = self._logs.get(container_id)
            return [line.text for line in list(log.lines)[-count:]] if log and count else []

    def forget(self, pod_uid: str) -> None:
        """A pod is gone: its containers' logs go too (followers' streams end)."""
        with self.changed:
            for key in [k for k in self._instances if k[0] == pod_uid]:
                for container_id in self._instances.pop(key):
                    log = self._logs.pop(container_id, None)
                    if log is not None:
                        log.finished = True
            self.changed.notify_all()

    def pods(self) -> set[str]:
        with self.changed:
            return {uid for uid, _ in self._instances}

    def reset(self) -> None:
        with self.changed:
            for log in self._logs.values():
                log.finished = True
            self._logs.clear()
            self._instances.clear()
            self.changed.notify_all()

    def close(self) -> None:
        """The emulator stops: every follower's stream ends."""
        with self.changed:
            self.closed = True
            self.changed.notify_all()
