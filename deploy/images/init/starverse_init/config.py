"""What the init reads from its environment. Paths are those inside the container; each is
taken below STARVERSE_ROOT (default `/`), so a test can run the init in a scratch directory the
way the platform mounts things in a pod."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

ACCESS_DIR = "/etc/starverse/access"
CLUSTER_SSH_DIR = "/etc/starverse/cluster-ssh"
HOST_KEY_NAME = "ssh_host_ed25519_key"


@dataclass(frozen=True)
class Config:
    root: Path
    home: Path  # root's home: .ssh/authorized_keys, .starverse/on-stop.d
    access_dir: Path  # the mounted access Secret
    cluster_ssh_dir: Path  # a cluster rank's shared key Secret (absent on a lone instance)
    disk: Path  # the instance's own disk (kept across stop/start and moves)
    etc: Path  # /etc: profile.d, environment, motd, starverse/ (generated configs)
    public: Path  # the read-only public pool
    nas: Path
    mnt: Path  # cloud disks are mounted below it
    sshd: str | None  # sshd's absolute path, None when the image has none
    sshd_privsep_dir: Path  # sshd's compiled-in privilege-separation directory (not below root)
    ssh_port: int
    ssh_listen: str  # "" = every address
    keys_poll_s: float
    stop_deadline_s: float
    jupyter_port: int
    jupyter_base_url: str
    instance_id: str
    console_url: str
    balance_url: str
    search_path: str  # PATH, for finding jupyter-lab, nvidia-smi and ssh-keygen
    # a file the program waits for (STARVERSE_GATE: a multi-node job's rank, opened by the
    # platform once the pre-flight check passed); None: the program starts at once
    gate: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        env = os.environ if env is None else env
        root = Path(env.get("STARVERSE_ROOT") or "/")
        search_path = env.get("PATH") or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"

        def inside(name: str, default: str) -> Path:
            return root / (env.get(name) or default).lstrip("/")

        sshd = env.get("STARVERSE_SSHD") or shutil.which("sshd", path=search_path)
        if sshd is None and os.path.exists("/usr/sbin/sshd"):
            sshd = "/usr/sbin/sshd"
        return cls(
            root=root,
            home=inside("STARVERSE_HOME", "/root"),
            access_dir=inside("STARVERSE_ACCESS_DIR", ACCESS_DIR),
            cluster_ssh_dir=inside("STARVERSE_CLUSTER_SSH_DIR", CLUSTER_SSH_DIR),
            disk=inside("STARVERSE_DISK", "/root/data"),
            etc=inside("STARVERSE_ETC", "/etc"),
            public=inside("STARVERSE_PUBLIC", "/public"),
            nas=inside("STARVERSE_NAS", "/nas"),
            mnt=inside("STARVERSE_MNT", "/mnt"),
            sshd=os.path.abspath(sshd) if sshd else None,
            sshd_privsep_dir=Path(env.get("STARVERSE_SSHD_PRIVSEP_DIR") or "/run/sshd"),
            ssh_port=int(env.get("STARVERSE_SSH_PORT") or 22),
            ssh_listen=env.get("STARVERSE_SSH_LISTEN") or "",
            keys_poll_s=float(env.get("STARVERSE_KEYS_POLL_S") or 10),
            stop_deadline_s=float(env.get("STARVERSE_STOP_DEADLINE_S") or 60),
            jupyter_port=int(env.get("STARVERSE_JUPYTER_PORT") or 8888),
            jupyter_base_url=env.get("STARVERSE_JUPYTER_BASE_URL") or "/",
            instance_id=env.get("STARVERSE_INSTANCE_ID") or "",
            console_url=env.get("STARVERSE_CONSOLE_URL") or "",
            balance_url=env.get("STARVERSE_BALANCE_URL") or "",
            search_path=search_path,
            gate=inside("STARVERSE_GATE", "") if env.get("STARVERSE_GATE") else None,
        )

    @property
    def state_dir(self) -> Path:
        """Files the init generates: sshd_config, the Jupyter config."""
        return self.etc / "starverse"

    @property
    def authorized_keys(self) -> Path:
        return self.home / ".ssh" / "authorized_keys"

    @property
    def host_key(self) -> Path:
        return self.disk / ".starverse" / "ssh" / HOST_KEY_NAME

    @property
    def hooks_dir(self) -> Path:
        return self.home / ".starverse" / "on-stop.d"

    def which(self, program: str) -> str | None:
        return shutil.which(program, path=self.search_path)
