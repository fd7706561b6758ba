"""The init's life: set the container up, keep sshd (and JupyterLab) running while following
the access Secret, and on SIGTERM run the on-stop hooks, then stop its children and exit.

Given a program (`starverse-init -- PROGRAM ARGS...`, a job's command), it runs the program as
well, in the home directory with the container's environment, and ends when the program ends,
with its exit status (128 + the signal's number when a signal ended it, as a shell reports it),
so the kubelet records the program's exit code as the container's. SSH stays up meanwhile, for
looking at a running job. On SIGTERM the program gets SIGTERM first and the stop deadline to
exit, then SIGKILL. With `STARVERSE_GATE` set (a multi-node job's rank) the program starts
only once that file exists: the platform writes it through pods/exec when the cluster's
pre-flight check has passed; SSH is up meanwhile.

Reaping orphans and forwarding the kubelet's signal are tini's work (PID 1); sshd and Jupyter
run in sessions of their own, so the signal reaches only this process and the hooks run while
Jupyter kernels and SSH sessions are still alive."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from starverse_init.access import KeyFollower, host_key_install, keys_sync
from starverse_init.cluster import cluster_ssh_install
from starverse_init.config import Config
from starverse_init.environment import environment_write, session_environment
from starverse_init.hooks import hooks_run
from starverse_init.jupyter import jupyter_command
from starverse_init.log import log
from starverse_init.motd import motd_write
from starverse_init.sshd import sshd_command, sshd_write

TICK_S = 0.5
GATE_POLL_S = 0.2
BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 60.0  # a child up this long starts its backoff afresh when it next dies
STOP_CHILDREN_S = 10.0


class Child:
    """A long-running program (sshd, Jupyter), started again with backoff when it dies."""

    def __init__(self, name: str, argv: list[str], cwd: str) -> None:
        self.name, self.argv, self.cwd = name, argv, cwd
        self.process: subprocess.Popen[bytes] | None = None
        self.backoff = 1.0
        self.started_at = 0.0
        self.start_at = 0.0

    def start(self) -> None:
        try:
            self.process = subprocess.Popen(
                self.argv, cwd=self.cwd, stdin=subprocess.DEVNULL, start_new_session=True
            )
        except OSError as error:
            log("child.failed", name=self.name, error=error)
            self._retry_later()
            return
        self.started_at = time.monotonic()
        log("child.started", name=self.name, pid=self.process.pid)

    def tick(self, now: float) -> None:
        if self.process is None:
            if now >= self.start_at:
                self.start()
            return
        code = self.process.poll()
        if code is None:
            return
        if now - self.started_at >= HEALTHY_AFTER_S:
            self.backoff = 1.0
        log("child.exited", name=self.name, code=code, restart_in_s=self.backoff)
        self.process = None
        self._retry_later()

    def _retry_later(self) -> None:
        self.process = None
        self.start_at = time.monotonic() + self.backoff
        self.backoff = min(self.backoff * 2, BACKOFF_MAX_S)

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)


def setup(config: Config) -> list[Child]:
    """Everything before the first log-in: environment files, a cluster rank's shared key,
    keys, host key, sshd's config, the message of the day, Jupyter's config. Returns the
    children to run."""
    variables = session_environment(os.environ)
    environment_write(config, variables)
    cluster_ssh_install(config)
    keys_sync(config)
    motd_write(config)
    children = []
    if config.sshd is None:
        log("sshd.absent", reason="no sshd in this image: SSH log-in is off")
    else:
        host_key = host_key_install(config)
        sshd_config_path = sshd_write(config, host_key, variables)
        children.append(Child("sshd", sshd_command(config, sshd_config_path), str(config.home)))
    jupyter = jupyter_command(config)
    if jupyter is not None:
        children.append(Child("jupyter", jupyter, str(config.home)))
    return children


def stop_children(children: list[Child]) -> None:
    for child in children:
        child.signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_CHILDREN_S
    for child in children:
        if child.process is None:
            continue
        try:
            child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.signal(signal.SIGKILL)
            child.process.wait()


def program_run(argv: list[str], cwd: str) -> subprocess.Popen[bytes] | None:
    """The job's program, in a session of its own (a signal reaches its whole process group),
    its output the container's (what `kubectl logs` shows). None if it cannot be started (the
    reason logged; the container then exits 127 as a shell does)."""
    try:
        return subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as error:
        log("program.failed", argv=" ".join(argv), error=error)
        return None


def program_stop(process: subprocess.Popen[bytes], deadline_s: float) -> int:
    """SIGTERM to the program's group, SIGKILL after `deadline_s`; its exit status."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        return exit_status(process.wait(timeout=deadline_s))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return exit_status(process.wait())


def exit_status(code: int) -> int:
    """A Popen return code as a shell reports it: a signal's death is 128 + its number."""
    return 128 - code if code < 0 else code


def gate_wait(
    gate: Path, stopping: threading.Event, children: list[Child], follower: KeyFollower
) -> None:
    """Keep SSH and the keys going until `gate` exists (or the container is told to stop)."""
    if not gate.exists():
        log("program.waiting", gate=str(gate))
    while not stopping.is_set() and not gate.exists():
        now = time.monotonic()
        follower.tick(now)
        for child in children:
            child.tick(now)
        stopping.wait(GATE_POLL_S)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    program = argv[argv.index("--") + 1 :] if "--" in argv else []
    config = Config.from_env()
    stopping = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log("signal", name=signal.Signals(signum).name)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log("starting", instance=config.instance_id or "-", root=config.root)
    children = setup(config)
    follower = KeyFollower(config)
    follower.tick()  # read now, then once every poll interval
    for child in children:
        child.start()
    if program and config.gate is not None:
        gate_wait(config.gate, stopping, children, follower)
    started = bool(program) and not stopping.is_set()  # stopped while waiting: never started
    process = program_run(program, str(config.home)) if started else None
    status = 127 if started and process is None else 0
    if process is not None:
        log("program.started", pid=process.pid, argv=" ".join(program))
    while not stopping.is_set() and status == 0:
        now = time.monotonic()
        follower.tick(now)
        for child in children:
            child.tick(now)
        if process is not None and process.poll() is not None:
            status = exit_status(process.returncode)
            log("program.exited", code=status)
            break
        stopping.wait(min(TICK_S, config.keys_poll_s))
    if process is not None and process.poll() is None:
        status = program_stop(process, config.stop_deadline_s)
        log("program.stopped", code=status)
    if stopping.is_set():
        results = hooks_run(config)
        log("hooks.done", count=len(results))
    stop_children(children)
    log("stopped")
    return status
