"""On stop (SIGTERM from the kubelet, through tini), the user's hooks in
~/.starverse/on-stop.d/ run one after another in name order, sharing one deadline: a training
job can write a last checkpoint. A hook still running at the deadline is stopped (its whole
process group: SIGTERM, then SIGKILL), and the hooks not yet begun are skipped."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass

from starverse_init.config import Config
from starverse_init.log import log

KILL_AFTER_S = 3.0


@dataclass(frozen=True)
class HookResult:
    name: str
    outcome: str  # "exit 0", "exit 3", "timeout", "skipped", "failed to start"


def hooks_run(config: Config, deadline_s: float | None = None) -> list[HookResult]:
    directory = config.hooks_dir
    if not directory.is_dir():
        return []
    deadline = time.monotonic() + (config.stop_deadline_s if deadline_s is None else deadline_s)
    results = []
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or not path.is_file() or not os.access(str(path), os.X_OK):
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            results.append(HookResult(path.name, "skipped"))
            log("hook.skipped", hook=path.name, reason="deadline")
            continue
        env = dict(os.environ, STARVERSE_STOP_SECONDS_LEFT=str(int(left)))
        try:
            process = subprocess.Popen(
                [str(path)],
                cwd=str(config.home),
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as error:
            results.append(HookResult(path.name, "failed to start"))
            log("hook.failed", hook=path.name, error=error)
            continue
        log("hook.started", hook=path.name, seconds_left=int(left))
        try:
            code = process.wait(timeout=left)
        except subprocess.TimeoutExpired:
            _group_stop(process)
            results.append(HookResult(path.name, "timeout"))
            log("hook.timeout", hook=path.name)
            continue
        results.append(HookResult(path.name, f"exit {code}"))
        log("hook.done", hook=path.name, code=code)
    return results


def _group_stop(process: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_AFTER_S), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
