"""The init end to end, without a container runtime: it runs in a scratch root laid out as the
platform mounts a pod (the access Secret as the kubelet writes it, the instance disk), with
Debian's real sshd on a free port, and the real ssh client logs in. A key deleted from the
Secret stops working once the init has picked the change up; the host key the client checks
is the platform's; the injected environment reaches the session; SIGTERM runs the on-stop
hooks; and the next boot serves the same host key from the disk.

sshd must be installed (.ci/run installs openssh-server): without it this test fails. The set-up
is the real-sshd tests' shared one (tests/sshd.py)."""

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from starverse.core.hostkeys import host_key_generate
from tests.sshd import InitRoot, user_key


@pytest.fixture
def instance(sshd_root: Path) -> Iterator[InitRoot]:
    made = InitRoot(sshd_root, host_key_generate())
    try:
        yield made
    finally:
        made.kill()


def test_log_in_with_a_chosen_key_until_it_is_deleted(instance):
    laptop, laptop_public = user_key(instance.root, "laptop")
    desktop, desktop_public = user_key(instance.root, "desktop")
    instance.secret(f"{laptop_public}\n{desktop_public}\n")
    hook = instance.root / "root" / ".starverse" / "on-stop.d" / "10-checkpoint"
    hook.parent.mkdir(parents=True)
    hook.write_text(
        f'#!/bin/sh\necho "saved $STARVERSE_INSTANCE_ID" > {instance.root / "checkpoint"}\n'
    )
    hook.chmod(0o755)
    instance.boot()

    # the client checks the host against the platform's key (StrictHostKeyChecking=yes)
    session = instance.ssh(
        laptop,
        'printf "%s|%s|%s" "$STARVERSE_INSTANCE_ID" "$NCCL_DEBUG" "${STARVERSE_API_TOKEN-unset}"',
    )
    assert session.returncode == 0, session.stderr + instance.log.read_text()
    assert session.stdout == "ins_e2e|INFO|unset"
    assert instance.ssh(desktop, "true").returncode == 0
    # no password, nor keyboard-interactive: the server offers public keys only
    password = instance.ssh(laptop, "true", "-o", "PreferredAuthentications=password")
    assert password.returncode == 255
    assert "Permission denied (publickey)" in password.stderr

    # the desktop key is deleted in the console: the kubelet swaps the Secret's files
    instance.secret(f"{laptop_public}\n")
    instance.wait_key_gone(desktop_public)
    refused = instance.ssh(desktop, "true")
    assert refused.returncode == 255
    assert "Permission denied" in refused.stderr
    assert instance.ssh(laptop, "echo still").stdout == "still\n"

    # the host key sshd serves lives on the instance disk, and it is the platform's
    on_disk = instance.root / "root" / "data" / ".starverse" / "ssh" / "ssh_host_ed25519_key"
    printed = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(on_disk)], capture_output=True, text=True, check=True
    ).stdout
    assert printed.split()[1] == instance.host_key.fingerprint

    # stop: the hooks run, then everything goes
    assert instance.stop() == 0
    assert (instance.root / "checkpoint").read_text() == "saved ins_e2e\n"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", instance.port), timeout=1).close()

    # the next boot (another node, the same disk) serves the same host key
    instance.boot()
    again = instance.ssh(laptop, "cat /etc/hostname >/dev/null && echo back")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "back\n"
    assert instance.stop() == 0
