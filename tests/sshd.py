"""The real-sshd tests' shared set-up: Debian's sshd run by the images' init (tests/images:
test_init_ssh, test_init_cluster_ssh, test_shell_init) or by make run's podsshd (tests/devstack/
test_podsshd.py, tests/instances/test_brought_image_init.py), and the real ssh client logging
in. A scratch root that sshd's StrictModes accepts (the `sshd_root` fixture of tests/conftest.py),
a user's key pair, the access Secret's data, a free port, starting the init and waiting until
its sshd listens, and the client with the options every such test uses.

sshd must be installed (.ci/run installs openssh-server): without it these tests fail."""

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
from contextlib import contextmanager
from pathlib import Path

from devstack.podsshd import access_write as secret_write
from starverse.core.hostkeys import HostKey

INIT = Path(__file__).resolve().parents[1] / "deploy" / "images" / "init"
SSHD = "/usr/sbin/sshd"
# how long sshd may take to listen, a changed Secret to be picked up, a stop to end
WAIT_S = 15.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1 at `port`."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def require_sshd() -> None:
    """Fail (never skip) where the real sshd cannot run as these tests need."""
    assert Path(SSHD).exists(), "sshd is missing: apt-get install openssh-server (.ci/run does)"
    assert shutil.which("ssh"), "the ssh client is missing: apt-get install openssh-client"
    assert os.geteuid() == 0, "sshd serves root logins only as root, as in the container and CI"


def safe_scratch() -> Path:
    """A scratch root whose every parent directory sshd's StrictModes accepts (root's, not
    group- or world-writable, so not below /tmp): under root's home directory."""
    base = Path(pwd.getpwuid(0).pw_dir) / ".cache" / "starverse-tests"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    scratch = Path(tempfile.mkdtemp(prefix="init-", dir=base))
    for directory in [scratch, *scratch.parents]:
        mode = directory.stat().st_mode
        assert directory.stat().st_uid == 0 and not mode & 0o022, f"{directory} is not safe"
    return scratch


@contextmanager
def sshd_scratch() -> Iterator[Path]:
    """sshd required, and a safe scratch root for the test, removed after it."""
    require_sshd()
    root = safe_scratch()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def user_key(directory: Path, name: str) -> tuple[Path, str]:
    """A user's ed25519 key pair made with ssh-keygen: its private key's path, its public line."""
    path = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True
    )
    return path, path.with_suffix(".pub").read_text().strip()


def access_data(authorized_keys: str, host_key: HostKey) -> dict[str, str]:
    """The access Secret's files, as the platform writes them for an instance."""
    return {
        "authorized_keys": authorized_keys,
        "jupyter_token": "never-shown",
        "ssh_host_ed25519_key": host_key.private_openssh,
        "ssh_host_ed25519_key.pub": host_key.public_openssh + "\n",
    }


def start_listening(
    argv: list[str], env: dict[str, str], log: Path, port: int
) -> subprocess.Popen[bytes]:
    """Start `argv` (an init, which starts sshd) in a session of its own, its output appended
    to `log`; return once something listens on `port`, failing with the log if the process
    ends first or nothing listens within WAIT_S."""
    with log.open("ab") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=out, start_new_session=True)
    deadline = time.monotonic() + WAIT_S
    while True:
        assert process.poll() is None, log.read_text()
        if listening(port):
            return process
        assert time.monotonic() < deadline, "sshd did not listen:\n" + log.read_text()
        time.sleep(0.05)


def kill_session(process: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL a process started by start_listening and everything in its session (sshd)."""
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def ssh(
    key: Path, port: int, known_hosts: Path, command: str, *options: str
) -> subprocess.CompletedProcess[str]:
    """The real ssh client as root@127.0.0.1:`port` with `key` only, no config file, no prompt,
    the host checked against `known_hosts` (StrictHostKeyChecking=yes)."""
    return subprocess.run(
        [
            *("ssh", "-F", "/dev/null", "-i", str(key), "-p", str(port)),
            *("-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10"),
            *("-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}"),
            *options,
            "root@127.0.0.1",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        check=False,
    )


class InitRoot:
    """The scratch root of one instance laid out as the platform mounts its pod (the access
    Secret as the kubelet writes it, the instance disk) and the images' init running in it,
    whose sshd listens on 127.0.0.1:`port`; `known_hosts` holds the platform's host key."""

    instance_id = "ins_e2e"

    def __init__(self, root: Path, host_key: HostKey) -> None:
        self.root, self.host_key, self.port = root, host_key, free_port()
        self.access = root / "etc" / "starverse" / "access"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root / "init.log"
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_key.public_openssh}\n")
        (root / "root" / "data").mkdir(parents=True)
        self.version = 0

    def secret(self, authorized_keys: str) -> None:
        """The access Secret's files written (again) with these keys, as the kubelet swaps
        them."""
        self.version += 1
        secret_write(self.access, access_data(authorized_keys, self.host_key), self.version)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "starverse_init"]

    def init_env(self) -> dict[str, str]:
        """What every init run here gets: the scratch root, its sshd on 127.0.0.1."""
        return {
            "PATH": "/usr/sbin:/usr/bin:/bin",
            "PYTHONPATH": str(INIT),
            "LANG": "C.UTF-8",
            "STARVERSE_ROOT": str(self.root),
            "STARVERSE_SSH_PORT": str(self.port),
            "STARVERSE_SSH_LISTEN": "127.0.0.1",
            "STARVERSE_KEYS_POLL_S": "1",
        }

    def env(self) -> dict[str, str]:
        """An instance's init: init_env and the instance's own."""
        return self.init_env() | {
            "STARVERSE_STOP_DEADLINE_S": "10",
            "STARVERSE_INSTANCE_ID": self.instance_id,
            "STARVERSE_API_TOKEN": "sv_must_not_leak",
            "NCCL_DEBUG": "INFO",
        }

    def boot(self) -> None:
        """The init started; returns once its sshd listens."""
        self.process = start_listening(self.argv(), self.env(), self.log, self.port)

    def ssh(self, key: Path, command: str, *options: str) -> subprocess.CompletedProcess[str]:
        return ssh(key, self.port, self.known_hosts, command, *options)

    def wait_key_gone(self, public: str) -> None:
        """Until the init has picked a changed Secret up: `public` gone from root's
        authorized_keys (it rereads the Secret every STARVERSE_KEYS_POLL_S)."""
        installed = self.root / "root" / ".ssh" / "authorized_keys"
        deadline = time.monotonic() + WAIT_S
        while public in installed.read_text():
            assert time.monotonic() < deadline, "the deleted key was not picked up"
            time.sleep(0.1)

    def stop(self) -> int:
        """SIGTERM, as the kubelet stops a container: the init's exit status."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=WAIT_S)
        self.process = None
        return code

    def kill(self) -> None:
        kill_session(self.process)
        self.process = None
