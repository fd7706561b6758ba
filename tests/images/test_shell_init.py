"""The shell init, for an image without python3: the platform's entrypoint runs it when it
finds no python3 3.8+ (STARVERSE_PYTHON set empty here, as this machine has one), in a scratch
root laid out as the platform mounts a pod, with Debian's real sshd; the real ssh client logs
in with the Secret's key against the platform's host key, the platform's environment reaches
the session without its secrets, a deleted key stops working, and SIGTERM runs the on-stop
hooks and ends it cleanly.

sshd must be installed (.ci/run installs openssh-server): without it this test fails. The set-up
is the real-sshd tests' shared one (tests/sshd.py)."""

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from starverse.core.hostkeys import host_key_generate
from tests.sshd import INIT, SSHD, InitRoot, user_key


class ShellInstance(InitRoot):
    """The init root with the platform's entrypoint, which runs the shell init here."""

    instance_id = "ins_sh"

    def argv(self) -> list[str]:
        tools = self.root / "opt" / "starverse"
        (tools / "bin").mkdir(parents=True, exist_ok=True)
        for program in ("entrypoint", "starverse-init-sh"):
            link = tools / "bin" / program
            if not link.exists():
                link.symlink_to(INIT / "bin" / program)
        return [str(tools / "bin" / "entrypoint")]

    def env(self) -> dict[str, str]:
        env = super().env()
        del env["PYTHONPATH"]
        tools = self.root / "opt" / "starverse"
        return env | {
            "STARVERSE_PYTHON": "",
            "STARVERSE_TOOLS": str(tools),
            "STARVERSE_SSHD": SSHD,
            "STARVERSE_TERMINATION_LOG": str(self.root / "termination-log"),
        }


@pytest.fixture
def instance(sshd_root: Path) -> Iterator[ShellInstance]:
    made = ShellInstance(sshd_root, host_key_generate())
    try:
        yield made
    finally:
        made.kill()


def test_the_shell_init_serves_ssh_with_the_platforms_environment(instance):
    laptop, laptop_public = user_key(instance.root, "laptop")
    desktop, desktop_public = user_key(instance.root, "desktop")
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
    instance.wait_key_gone(desktop_public)
    assert instance.ssh(desktop, "true").returncode == 255
    profile = (instance.root / "etc" / "profile.d" / "starverse.sh").read_text()
    assert "export STARVERSE_INSTANCE_ID='ins_sh'" in profile
    assert "sv_must_not_leak" not in profile

    assert instance.stop() == 0  # SIGTERM: the hooks run, then everything goes
    assert (instance.root / "checkpoint").read_text().startswith("saved ")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", instance.port), timeout=1).close()
