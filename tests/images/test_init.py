"""The images' init package, piece by piece, in a scratch root: the environment it passes on,
the keys it installs and follows, the host key it keeps on the disk, sshd's and Jupyter's
configuration, the message of the day and the on-stop hooks with their deadline."""

import ast
import json
import stat
import subprocess
import time
from pathlib import Path

from starverse_init.access import KeyFollower, host_key_install, keys_sync
from starverse_init.config import Config
from starverse_init.environment import environment_write, session_environment
from starverse_init.hooks import hooks_run
from starverse_init.jupyter import jupyter_command
from starverse_init.motd import motd
from starverse_init.sshd import sshd_config, sshd_write

from starverse.core.hostkeys import host_key_generate
from tests.factories import ed25519_public_key
from tests.sshd import INIT, SSHD, secret_write


def _config(root: Path, **env: str) -> Config:
    return Config.from_env({"STARVERSE_ROOT": str(root), "PATH": "/usr/bin:/bin", **env})


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_package_is_python_3_8_syntax():
    files = sorted((INIT / "starverse_init").glob("*.py"))
    assert len(files) >= 8
    for path in files:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))


def test_sessions_get_the_platforms_variables_and_no_secrets():
    chosen = session_environment(
        {
            "STARVERSE_INSTANCE_ID": "ins_1",
            "NVIDIA_VISIBLE_DEVICES": "0,1",
            "NCCL_DEBUG": "INFO",
            "MASTER_ADDR": "10.0.0.2",
            "WORLD_SIZE": "16",
            "PATH": "/opt/conda/bin:/usr/bin",
            "HOME": "/root",
            "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            "JUPYTER_TOKEN": "t0ken",
            "STARVERSE_API_TOKEN": "sv_x",
            "NCCL_SECRET": "x",
            "STARVERSE_ROOT": "/tmp/x",
            "STARVERSE_NOTE": 'has "quotes"',
            "CUDA_NOTE": "two\nlines",
        }
    )

    assert chosen == {
        "MASTER_ADDR": "10.0.0.2",
        "NCCL_DEBUG": "INFO",
        "NVIDIA_VISIBLE_DEVICES": "0,1",
        "PATH": "/opt/conda/bin:/usr/bin",
        "STARVERSE_INSTANCE_ID": "ins_1",
        "WORLD_SIZE": "16",
    }


def test_profile_and_environment_files_carry_the_variables(tmp_path):
    config = _config(tmp_path)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "environment").write_text('LANG="C.UTF-8"\nNCCL_DEBUG="WARN"\n')
    variables = {"NCCL_DEBUG": "INFO", "STARVERSE_INSTANCE_ID": "ins_1", "X_Y": "a b'c"}

    environment_write(config, variables)
    environment_write(config, variables)  # every start writes them again: no duplicates

    profile = tmp_path / "etc" / "profile.d" / "starverse.sh"
    shown = subprocess.run(
        [
            "sh",
            "-c",
            f'. {profile}; printf "%s|%s|%s" "$NCCL_DEBUG" "$STARVERSE_INSTANCE_ID" "$X_Y"',
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown == "INFO|ins_1|a b'c"
    assert (tmp_path / "etc" / "environment").read_text() == (
        'LANG="C.UTF-8"\n'
        "# set by starverse-init\n"
        'NCCL_DEBUG="INFO"\n'
        'STARVERSE_INSTANCE_ID="ins_1"\n'
        'X_Y="a b\'c"\n'
    )


def test_keys_are_installed_from_the_secret_and_follow_its_changes(tmp_path):
    config = _config(tmp_path)
    access = tmp_path / "etc" / "starverse" / "access"
    kept, dropped = ed25519_public_key("kept"), ed25519_public_key("laptop")
    secret_write(access, {"authorized_keys": f"{kept}\n\n# comment\n{dropped}\n"})

    assert keys_sync(config) is True
    target = tmp_path / "root" / ".ssh" / "authorized_keys"
    assert target.read_text() == f"{kept}\n{dropped}\n"
    assert _mode(target) == 0o600
    assert _mode(target.parent) == 0o700
    assert keys_sync(config) is False  # nothing changed, nothing written

    secret_write(access, {"authorized_keys": f"{kept}\n"}, version=2)
    assert keys_sync(config) is True
    assert target.read_text() == f"{kept}\n"

    secret_write(access, {"authorized_keys": ""}, version=3)
    assert keys_sync(config) is True
    assert target.read_text() == ""  # every key deleted: nobody logs in


def test_keys_are_reread_once_a_poll_interval(tmp_path):
    config = _config(tmp_path, STARVERSE_KEYS_POLL_S="10")
    access = tmp_path / "etc" / "starverse" / "access"
    secret_write(access, {"authorized_keys": ed25519_public_key() + "\n"})
    follower = KeyFollower(config)
    target = tmp_path / "root" / ".ssh" / "authorized_keys"

    assert follower.tick(now=100.0) is True
    secret_write(access, {"authorized_keys": ""}, version=2)
    assert follower.tick(now=109.0) is False
    assert target.read_text() != ""
    assert follower.tick(now=110.0) is True
    assert target.read_text() == ""


def test_the_platforms_host_key_is_kept_on_the_instance_disk(tmp_path):
    config = _config(tmp_path)
    key = host_key_generate()
    secret_write(
        tmp_path / "etc" / "starverse" / "access",
        {
            "ssh_host_ed25519_key": key.private_openssh,
            "ssh_host_ed25519_key.pub": key.public_openssh + "\n",
        },
    )

    path = host_key_install(config)

    assert path == tmp_path / "root" / "data" / ".starverse" / "ssh" / "ssh_host_ed25519_key"
    assert path.read_text() == key.private_openssh
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    assert path.with_name("ssh_host_ed25519_key.pub").read_text() == key.public_openssh + "\n"
    printed = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(path)], capture_output=True, text=True, check=True
    ).stdout
    assert printed.split()[1] == key.fingerprint

    path.write_text("damaged")  # the disk copy never drifts from the key the console shows
    host_key_install(config)
    assert path.read_text() == key.private_openssh


def test_without_a_platform_key_one_is_made_on_the_disk_once(tmp_path):
    config = _config(tmp_path)

    first = host_key_install(config).read_text()
    again = host_key_install(config).read_text()  # the next start: the disk copy is used

    assert first.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert again == first


def test_sshd_config_allows_keys_only_and_sshd_accepts_it(tmp_path):
    assert Path(SSHD).exists(), "sshd is missing: apt-get install openssh-server (.ci/run does)"
    config = _config(tmp_path, STARVERSE_SSH_PORT="2222")
    host_key = host_key_install(config)
    variables = {"STARVERSE_INSTANCE_ID": "ins_1", "PATH": "/opt/conda/bin:/usr/bin"}

    text = sshd_config(config, host_key, variables)
    path = sshd_write(config, host_key, variables)

    lines = text.splitlines()
    for line in (
        "Port 2222",
        f"HostKey {host_key}",
        f"AuthorizedKeysFile {tmp_path}/root/.ssh/authorized_keys",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        'SetEnv "PATH=/opt/conda/bin:/usr/bin" "STARVERSE_INSTANCE_ID=ins_1"',
    ):
        assert line in lines
    assert sum(line.startswith("SetEnv") for line in lines) == 1  # sshd keeps only the first
    assert _mode(path) == 0o600
    checked = subprocess.run([SSHD, "-t", "-f", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    effective = subprocess.run(
        [SSHD, "-T", "-f", str(path), "-C", "user=root,host=h,addr=127.0.0.1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert "passwordauthentication no" in effective
    assert "permitrootlogin without-password" in effective  # sshd's name for prohibit-password


def _fake_program(directory: Path, name: str, script: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    program = directory / name
    program.write_text(f"#!/bin/sh\n{script}\n")
    program.chmod(0o755)


def test_jupyter_starts_only_if_the_image_has_it_and_a_token_exists(tmp_path):
    bin_dir = tmp_path / "bin"
    access = tmp_path / "etc" / "starverse" / "access"
    secret_write(access, {"jupyter_token": "tok-123\n"})
    path = f"{bin_dir}:/usr/bin:/bin"

    without = _config(tmp_path, PATH=path)
    assert jupyter_command(without) is None

    _fake_program(bin_dir, "jupyter-lab", "exit 0")
    config = _config(tmp_path, PATH=path, STARVERSE_JUPYTER_BASE_URL="/jupyter/ins_1")
    command = jupyter_command(config)

    settings_path = tmp_path / "etc" / "starverse" / "jupyter_server_config.json"
    assert command == [
        str(bin_dir / "jupyter-lab"),
        f"--config={settings_path}",
        "--ip=0.0.0.0",
        "--port=8888",
        "--no-browser",
        "--allow-root",
    ]
    assert all("tok-123" not in part for part in command)
    assert json.loads(settings_path.read_text()) == {
        "IdentityProvider": {"token": "tok-123"},
        "ServerApp": {
            "token": "tok-123",
            "base_url": "/jupyter/ins_1/",
            "root_dir": str(tmp_path / "root"),
        },
    }
    assert _mode(settings_path) == 0o600

    secret_write(access, {"jupyter_token": ""}, version=2)
    assert jupyter_command(config) is None  # no token: never an open Jupyter


def test_the_message_of_the_day_names_gpus_disks_pool_and_balance(tmp_path):
    bin_dir = tmp_path / "bin"
    _fake_program(bin_dir, "nvidia-smi", 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"')
    for directory in ("root/data", "mnt/ckpt", "public/data", "nas"):
        (tmp_path / directory).mkdir(parents=True)
    config = _config(
        tmp_path,
        PATH=f"{bin_dir}:/usr/bin:/bin",
        STARVERSE_INSTANCE_ID="ins_1",
        STARVERSE_BALANCE_URL="https://console.example/billing/",
    )

    text = motd(config)

    assert text.startswith("Starverse instance ins_1\n\nGPUs:\n  GPU 0: NVIDIA H100 80GB HBM3")
    assert "  /root/data" in text and "instance disk, kept across stop and start" in text
    assert "  /mnt/ckpt" in text and "cloud disk" in text
    assert "  /nas" in text
    assert "Public datasets and models (read-only): /public/data, /public/models" in text
    assert "Balance and top-ups: https://console.example/billing/" in text
    assert "/root/.starverse/on-stop.d/" in text


def _hook(directory: Path, name: str, body: str, executable: bool = True) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755 if executable else 0o644)


def test_stop_hooks_run_in_order_within_one_deadline(tmp_path):
    config = _config(tmp_path, STARVERSE_STOP_DEADLINE_S="60")
    hooks = tmp_path / "root" / ".starverse" / "on-stop.d"
    log = tmp_path / "ran"
    _hook(hooks, "20-second", f'echo "second $STARVERSE_STOP_SECONDS_LEFT" >> {log}; exit 3')
    _hook(hooks, "10-first", f"echo first >> {log}")
    _hook(hooks, "30-not-executable", f"echo never >> {log}", executable=False)
    _hook(hooks, ".hidden", f"echo never >> {log}")

    results = hooks_run(config)

    assert [(r.name, r.outcome) for r in results] == [
        ("10-first", "exit 0"),
        ("20-second", "exit 3"),
    ]
    first, second = log.read_text().splitlines()
    assert first == "first"
    assert second.startswith("second ") and 55 <= int(second.split()[1]) <= 60


def test_a_hook_past_the_deadline_is_stopped_and_the_rest_skipped(tmp_path):
    config = _config(tmp_path)
    hooks = tmp_path / "root" / ".starverse" / "on-stop.d"
    pid_file = tmp_path / "pid"
    _hook(hooks, "10-slow", f"sleep 60 & echo $! > {pid_file}; wait")
    _hook(hooks, "20-later", f"echo never >> {tmp_path / 'ran'}")

    started = time.monotonic()
    results = hooks_run(config, deadline_s=1.0)

    assert time.monotonic() - started < 10
    assert [(r.name, r.outcome) for r in results] == [
        ("10-slow", "timeout"),
        ("20-later", "skipped"),
    ]
    assert not (tmp_path / "ran").exists()
    # the hook's whole process group went, its background child too
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _running(child):
        assert time.monotonic() < deadline, "the hook's background child still runs"
        time.sleep(0.05)


def _running(pid: int) -> bool:
    """Whether a process runs (a zombie left for PID 1 to reap does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
