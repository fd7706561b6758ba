"""sshd's configuration: public keys only, root without a password, the host key from the
instance disk, the platform's environment in every session."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from starverse_init.config import Config
from starverse_init.environment import sshd_setenv
from starverse_init.files import write_atomic


def sshd_config(config: Config, host_key: Path, variables: Mapping[str, str]) -> str:
    listen = f"ListenAddress {config.ssh_listen}\n" if config.ssh_listen else ""
    return (
        "# Written by starverse-init at every start; changes here do not last.\n"
        f"Port {config.ssh_port}\n"
        f"{listen}"
        f"HostKey {host_key}\n"
        f"AuthorizedKeysFile {config.authorized_keys}\n"
        f"PidFile {config.state_dir / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "PermitEmptyPasswords no\n"
        # No PAM: a container has no login stack to speak of, and the environment comes from
        # SetEnv below. sshd still refuses root if /etc/shadow locks it with "!".
        "UsePAM no\n"
        "StrictModes yes\n"
        "PrintMotd yes\n"
        "X11Forwarding no\n"
        "AllowTcpForwarding yes\n"
        "ClientAliveInterval 60\n"
        "AcceptEnv LANG LC_*\n"
        "Subsystem sftp internal-sftp\n"
        f"{sshd_setenv(variables)}"
    )


def sshd_write(config: Config, host_key: Path, variables: Mapping[str, str]) -> Path:
    path = config.state_dir / "sshd_config"
    write_atomic(path, sshd_config(config, host_key, variables), 0o600)
    # sshd's compiled-in privilege-separation directory (it refuses to start without it)
    config.sshd_privsep_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    return path


def sshd_command(config: Config, config_path: Path) -> list[str]:
    assert config.sshd is not None
    return [config.sshd, "-D", "-e", "-f", str(config_path)]
