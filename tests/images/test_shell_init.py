"""The shell init, for an image without python3: the platform's entrypoint runs it when it
finds no python3 3.8+ (STARVERSE_PYTHON set empty here, as this machine has one), in a scratch
root laid out as the platform mounts a pod, with Debian's real sshd; the real ssh client logs
in with the Secret's key against the platform's host key, the platform's environment reaches
the session without its secrets, a deleted key stops working, and SIGTERM runs the on-stop
hooks and ends it cleanly.

sshd must be installed (.ci/run installs openssh-server): without it this test fails."""

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from starverse.core.hostkeys import host_key_generate
from tests.images.test_init import INIT, SSHD
from tests.images.test_init_ssh import WAIT_S, Instance, _safe_scratch, _user_key


class ShellInstance(Instance):
    def boot(self) -> None:
        tools = self.root / "opt" / "starverse"
        (tools / "bin").mkdir(parents=True, exist_ok=True)
        for program in ("entrypoint", "starverse-init-sh"):
            link = tools / "bin" / program
            if not link.exists():
                link.symlink_to(INIT / "bin" / program)
        env = {
            "PATH": "/usr/sbin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "STARVERSE_PYTHON": "",
            "STARVERSE_TOOLS": str(tools),
            "STARVERSE_SSHD": SSHD,
            "STARVERSE_TERMINATION_LOG": str(self.root / "termination-log"),
            "STARVERSE_ROOT": str(self.root),
            "STARVERSE_SSH_PORT": str(self.port),
            "STARVERSE_SSH_LISTEN": "127.0.0.1",
            "STARVERSE_KEYS_POLL_S": "1",
            "STARVERSE_STOP_DEADLINE_S": "10",
            "STARVERSE_INSTANCE_ID": "ins_sh",
            "STARVERSE_API_TOKEN": "sv_must_not_leak",
            "NCCL_DEBUG": "INFO",
        }
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(tools / "bin" / "entrypoint")],
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + WAIT_S
        while True:
            assert self.process.poll() is None, self.log.read_text()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "sshd did not listen:\n" + self.log.read_text()
                time.sleep(0.1)


@pytest.fixture
def instance() -> Iterator[ShellInstance]:
    assert shutil.which("sshd") or os.path.exists(SSHD), "apt-get install openssh-server"
    assert os.geteuid() == 0, "sshd runs as root here, as in the container and in CI"
    root = _safe_scratch()
    made = ShellInstance(root, host_key_generate())
    try:
        yield made
    finally:
        made.kill()
        shutil.rmtree(root, ignore_errors=True)


def test_the_shell_init_serves_ssh_with_the_platforms_environment(instance):
    laptop, laptop_public = _user_key(instance.root, "laptop")
    desktop, desktop_public = _user_key(instance.root, "desktop")
    instance.secret(f"{laptop_public}\n{desktop_public}\n")
    hook = instance.root / "root" / ".starverse" / "on-stop.d" / "10-checkpoint"
    hook.parent.mkdir(parents=True)
    hook.write_text(
        f'#!/bin/sh\necho "saved $STARVERSE_STOP_SECONDS_LEFT" > {instance.root / "checkpoint"}\n'
    )
    hook.chmod(0o755)
    instance.boot()

    session = instance.ssh(
        laptop,
        'printf "%s|%s|%s" "$STARVERSE_INSTANCE_ID" "$NCCL_DEBUG" "${STARVERSE_API_TOKEN-unset}"',
    )
    assert session.returncode == 0, session.stderr + instance.log.read_text()
    assert session.stdout == "ins_sh|INFO|unset"
    assert "python" not in instance.log.read_text()
    password = instance.ssh(laptop, "true", "-o", "PreferredAuthentications=password")
    assert password.returncode == 255

    # the desktop key is deleted: the kubelet swaps the Secret's files, the init follows
    instance.secret(f"{laptop_public}\n")
    installed = instance.root / "root" / ".ssh" / "authorized_keys"
    deadline = time.monotonic() + WAIT_S
    while desktop_public in installed.read_text():
        assert time.monotonic() < deadline, "the deleted key was not picked up"
        time.sleep(0.2)
    assert instance.ssh(desktop, "true").returncode == 255
    profile = (instance.root / "etc" / "profile.d" / "starverse.sh").read_text()
    assert "export STARVERSE_INSTANCE_ID='ins_sh'" in profile
    assert "sv_must_not_leak" not in profile

    assert instance.process is not None
    instance.process.send_signal(signal.SIGTERM)
    assert instance.process.wait(timeout=WAIT_S) == 0
    instance.process = None
    assert (instance.root / "checkpoint").read_text().startswith("saved ")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", instance.port), timeout=1).close()
