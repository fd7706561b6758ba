"""The init end to end, without a container runtime: it runs in a scratch root laid out as the
platform mounts a pod (the access Secret as the kubelet writes it, the instance disk), with
Debian's real sshd on a free port, and the real ssh client logs in. A key deleted from the
Secret stops working once the init has picked the change up; the host key the client checks
is the platform's; the injected environment reaches the session; SIGTERM runs the on-stop
hooks; and the next boot serves the same host key from the disk.

sshd must be installed (.ci/run installs openssh-server): without it this test fails."""

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from starverse.core.hostkeys import HostKey, host_key_generate
from tests.images.test_init import INIT, SSHD, secret_write

WAIT_S = 15.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _safe_scratch() -> Path:
    """A scratch root whose every parent directory sshd's StrictModes accepts (root's, not
    group- or world-writable, so not below /tmp): under root's home directory."""
    base = Path(pwd.getpwuid(0).pw_dir) / ".cache" / "starverse-tests"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    scratch = Path(tempfile.mkdtemp(prefix="init-", dir=base))
    for directory in [scratch, *scratch.parents]:
        mode = directory.stat().st_mode
        assert directory.stat().st_uid == 0 and not mode & 0o022, f"{directory} is not safe"
    return scratch


class Instance:
    """The scratch root of one instance and its running init."""

    def __init__(self, root: Path, host_key: HostKey) -> None:
        self.root, self.host_key, self.port = root, host_key, _free_port()
        self.access = root / "etc" / "starverse" / "access"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root / "init.log"
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_key.public_openssh}\n")
        (root / "root" / "data").mkdir(parents=True)
        self.version = 0

    def secret(self, authorized_keys: str) -> None:
        self.version += 1
        secret_write(
            self.access,
            {
                "authorized_keys": authorized_keys,
                "jupyter_token": "never-shown",
                "ssh_host_ed25519_key": self.host_key.private_openssh,
                "ssh_host_ed25519_key.pub": self.host_key.public_openssh + "\n",
            },
            version=self.version,
        )

    def boot(self) -> None:
        env = {
            "PATH": "/usr/sbin:/usr/bin:/bin",
            "PYTHONPATH": str(INIT),
            "LANG": "C.UTF-8",
            "STARVERSE_ROOT": str(self.root),
            "STARVERSE_SSH_PORT": str(self.port),
            "STARVERSE_SSH_LISTEN": "127.0.0.1",
            "STARVERSE_KEYS_POLL_S": "1",
            "STARVERSE_STOP_DEADLINE_S": "10",
            "STARVERSE_INSTANCE_ID": "ins_e2e",
            "STARVERSE_API_TOKEN": "sv_must_not_leak",
            "NCCL_DEBUG": "INFO",
        }
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "starverse_init"],
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

    def ssh(self, key: Path, command: str, *options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "ssh",
                "-F",
                "/dev/null",
                "-i",
                str(key),
                "-p",
                str(self.port),
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                f"UserKnownHostsFile={self.known_hosts}",
                "-o",
                "ConnectTimeout=10",
                *options,
                "root@127.0.0.1",
                command,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )

    def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=WAIT_S)
        self.process = None
        return code

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _user_key(directory: Path, name: str) -> tuple[Path, str]:
    path = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True
    )
    return path, path.with_suffix(".pub").read_text().strip()


@pytest.fixture
def instance() -> Iterator[Instance]:
    assert Path(SSHD).exists(), "sshd is missing: apt-get install openssh-server (.ci/run does)"
    assert shutil.which("ssh"), "the ssh client is missing: apt-get install openssh-client"
    assert os.geteuid() == 0, "sshd runs as root here, as in the container and in CI"
    root = _safe_scratch()
    made = Instance(root, host_key_generate())
    try:
        yield made
    finally:
        made.kill()
        shutil.rmtree(root, ignore_errors=True)


def test_log_in_with_a_chosen_key_until_it_is_deleted(instance):
    laptop, laptop_public = _user_key(instance.root, "laptop")
    desktop, desktop_public = _user_key(instance.root, "desktop")
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
    installed = instance.root / "root" / ".ssh" / "authorized_keys"
    deadline = time.monotonic() + WAIT_S
    while desktop_public in installed.read_text():
        assert time.monotonic() < deadline, "the deleted key was not picked up"
        time.sleep(0.2)
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
