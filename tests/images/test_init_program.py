"""The init with a program (a job's command: `starverse-init -- PROGRAM ARGS...`): the
container's exit code is the program's, its output the container's log, SSH is up meanwhile,
and SIGTERM reaches the program, which gets the stop deadline to exit."""

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.sshd import INIT, free_port

WAIT_S = 20


def _init(
    root: Path, *program: str, deadline_s: str = "5", gate: str = ""
) -> subprocess.Popen[str]:
    (root / "root" / "data").mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": "/usr/sbin:/usr/bin:/bin",
        "PYTHONPATH": str(INIT),
        "LANG": "C.UTF-8",
        "STARVERSE_ROOT": str(root),
        "STARVERSE_SSH_PORT": str(free_port()),
        "STARVERSE_SSH_LISTEN": "127.0.0.1",
        "STARVERSE_STOP_DEADLINE_S": deadline_s,
        "STARVERSE_JOB_ID": "job_1",
        **({"STARVERSE_GATE": gate} if gate else {}),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "starverse_init", "--", *program],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_the_containers_exit_code_and_output_are_the_programs(tmp_path):
    init = _init(tmp_path, "sh", "-c", 'echo "step 1 of $STARVERSE_JOB_ID in $PWD"; exit 7')
    out, _ = init.communicate(timeout=WAIT_S)
    assert init.returncode == 7, out
    assert f"step 1 of job_1 in {tmp_path / 'root'}" in out
    assert "program.exited" in out


def test_a_program_that_succeeds_ends_the_container_with_0(tmp_path):
    init = _init(tmp_path, "true")
    out, _ = init.communicate(timeout=WAIT_S)
    assert init.returncode == 0, out


def test_a_program_that_cannot_start_exits_127_as_a_shell_does(tmp_path):
    init = _init(tmp_path, str(tmp_path / "no-such-program"))
    out, _ = init.communicate(timeout=WAIT_S)
    assert init.returncode == 127, out
    assert "program.failed" in out


def test_sigterm_reaches_the_program_and_its_status_is_the_containers(tmp_path):
    started = tmp_path / "started"
    script = f"trap 'echo saving; exit 143' TERM; touch {started}; while :; do sleep 0.1; done"
    init = _init(tmp_path, "sh", "-c", script)
    deadline = time.monotonic() + WAIT_S
    while not started.exists():
        assert init.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    init.send_signal(signal.SIGTERM)
    out, _ = init.communicate(timeout=WAIT_S)
    assert init.returncode == 143, out
    assert "saving" in out


def test_a_program_deaf_to_sigterm_is_killed_at_the_deadline(tmp_path):
    started = tmp_path / "started"
    script = f"trap '' TERM; touch {started}; while :; do sleep 0.1; done"
    init = _init(tmp_path, "sh", "-c", script, deadline_s="1")
    deadline = time.monotonic() + WAIT_S
    while not started.exists():
        assert init.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    began = time.monotonic()
    init.send_signal(signal.SIGTERM)
    out, _ = init.communicate(timeout=WAIT_S)
    assert init.returncode == 128 + signal.SIGKILL, out
    assert 0.8 <= time.monotonic() - began < 10


def test_with_a_gate_the_program_starts_only_once_the_gate_file_exists(tmp_path):
    """A multi-node job's rank (clusters.gates): the platform writes the file once the
    pre-flight check passed; until then the program has not started."""
    started = tmp_path / "started"
    (tmp_path / "run" / "gate").mkdir(parents=True)
    init = _init(tmp_path, "sh", "-c", f"touch {started}; exit 3", gate="/run/gate/open")
    time.sleep(1.5)
    assert init.poll() is None and not started.exists()
    (tmp_path / "run" / "gate" / "open").touch()
    out, _ = init.communicate(timeout=WAIT_S)
    assert init.returncode == 3, out
    assert started.exists()
    assert "program.waiting" in out
