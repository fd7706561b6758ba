"""A cluster rank's SSH between ranks: the cluster's shared key pair (its mounted Secret) is
installed as root's own key, its public half is among the authorized keys (access.wanted_keys),
and root's ssh_config reaches the cluster's hosts with it, checking their host keys against
the Secret's known_hosts, so DeepSpeed's pdsh, `colossalai run` and mpirun log in to every rank
without a password or a prompt. A lone instance has no such Secret and nothing is written."""

from __future__ import annotations

import os
from pathlib import Path

from starverse_init.config import CLUSTER_SSH_DIR, Config
from starverse_init.files import read_text, write_atomic
from starverse_init.log import log

BEGIN = "# >>> starverse cluster (written by starverse-init at every start) >>>"
END = "# <<< starverse cluster <<<"


def ssh_config_merge(current: str, block: str) -> str:
    """Root's ssh_config with the cluster's block first (ssh takes the first value it meets, so
    the cluster's hosts get these) and the user's own lines kept after it."""
    kept, inside = [], False
    for line in current.splitlines():
        if line == BEGIN:
            inside = True
        elif line == END:
            inside = False
        elif not inside:
            kept.append(line)
    rest = "\n".join(kept).strip("\n")
    ours = f"{BEGIN}\n{block.rstrip()}\n{END}\n"
    return ours + (f"\n{rest}\n" if rest else "")


def cluster_ssh_install(config: Config) -> bool:
    """Install the cluster's key pair and ssh_config for root; returns whether this is a
    cluster rank (its Secret is mounted)."""
    source = config.cluster_ssh_dir
    private = read_text(source / "id_ed25519")
    if not private:
        return False
    ssh_dir = config.home / ".ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(str(ssh_dir), 0o700)
    write_atomic(ssh_dir / "id_ed25519", private, 0o600)
    write_atomic(ssh_dir / "id_ed25519.pub", read_text(source / "id_ed25519.pub") or "", 0o644)
    block = (
        (read_text(source / "ssh_config") or "")
        .replace("~/.ssh/", f"{_home_path(config, ssh_dir)}/")
        .replace(CLUSTER_SSH_DIR, str(source))
    )
    path = ssh_dir / "config"
    write_atomic(path, ssh_config_merge(read_text(path) or "", block), 0o600)
    log("cluster.ssh_installed", path=ssh_dir)
    return True


def _home_path(config: Config, ssh_dir: Path) -> str:
    """~/.ssh as root's ssh sees it: ~ unless the init runs in a scratch root (tests)."""
    return "~/.ssh" if str(config.root) == "/" else str(ssh_dir)
