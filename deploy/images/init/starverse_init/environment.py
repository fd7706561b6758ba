"""The environment the platform and the image give the container, made visible to SSH sessions
(which sshd starts with a clean environment): as SetEnv lines in sshd_config for every session,
in /etc/profile.d for login shells (whose /etc/profile may reset PATH), and in /etc/environment
for PAM and other readers. Only a named set is passed on, and nothing that looks like a secret."""

from __future__ import annotations

import re
import shlex
from typing import Mapping

from starverse_init.config import Config
from starverse_init.files import read_text, write_atomic

PREFIXES = (
    "STARVERSE_",
    "NVIDIA_",
    "NV_",
    "CUDA_",
    "CUDNN_",
    "NCCL_",
    "MASTER_",
    "PET_",
    "TORCH_",
    "LC_",
)
NAMES = {
    "PATH",
    "LD_LIBRARY_PATH",
    "LIBRARY_PATH",
    "PYTHONPATH",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "NODE_RANK",
    "NNODES",
    "NPROC_PER_NODE",
    "LOCAL_WORLD_SIZE",
    "LANG",
    "LANGUAGE",
    "TZ",
    "CONDA_DIR",
    "CONDA_PREFIX",
    "HF_HOME",
    # the operator's academic mirrors (instances.mirrors), for the tools run in SSH sessions
    "PIP_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "CONDA_CHANNELS",
    "HF_ENDPOINT",
    "GITHUB_PROXY",
}
# Never passed on, whatever the prefix: the init's own settings and anything secret-looking
# (the Jupyter token is read from the Secret file, and stays there).
INTERNAL = {"STARVERSE_ROOT", "STARVERSE_SSHD", "STARVERSE_SSHD_PRIVSEP_DIR"}
SECRET_WORDS = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MANAGED_MARK = "# set by starverse-init"


def session_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables SSH sessions get: the named set, without secrets or unsafe values."""
    chosen = {}
    for name, value in env.items():
        if not NAME.match(name) or name in INTERNAL or SECRET_WORDS.search(name):
            continue
        if name not in NAMES and not name.startswith(PREFIXES):
            continue
        if any(c in value for c in '"\\\n\r\0'):
            continue  # cannot be written safely into sshd_config and /etc/environment
        chosen[name] = value
    return dict(sorted(chosen.items()))


def environment_write(config: Config, variables: Mapping[str, str]) -> None:
    """/etc/profile.d/starverse.sh and the platform's lines of /etc/environment (the image's
    own lines for other names are kept)."""
    profile = [f"{MANAGED_MARK}: the platform's environment, for login shells"]
    profile += [f"export {name}={shlex.quote(value)}" for name, value in variables.items()]
    write_atomic(config.etc / "profile.d" / "starverse.sh", "\n".join(profile) + "\n", 0o644)

    path = config.etc / "environment"
    kept = []
    for line in (read_text(path) or "").splitlines():
        name = line.split("=", 1)[0].strip()
        if line.strip() == MANAGED_MARK or name in variables:
            continue
        kept.append(line)
    ours = [MANAGED_MARK] + [f'{name}="{value}"' for name, value in variables.items()]
    write_atomic(path, "\n".join(kept + ours) + "\n", 0o644)


def sshd_setenv(variables: Mapping[str, str]) -> str:
    """The SetEnv line for sshd_config: one line (sshd keeps only its first SetEnv), each whole
    NAME=value token quoted, the form every OpenSSH since 7.8 reads."""
    if not variables:
        return ""
    return (
        "SetEnv "
        + " ".join(f'"{name}={value}"' for name, value in sorted(variables.items()))
        + "\n"
    )
