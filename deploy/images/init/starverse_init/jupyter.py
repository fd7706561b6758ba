"""JupyterLab, when the image has it: on the platform's port and base URL, behind the token from
the access Secret. The token goes into a config file only root can read, never onto the
command line (where `ps` shows it to every process) nor into the environment."""

from __future__ import annotations

import json
from pathlib import Path

from starverse_init.config import Config
from starverse_init.files import read_text, write_atomic
from starverse_init.log import log


def jupyter_token(config: Config) -> str:
    return (read_text(config.access_dir / "jupyter_token") or "").strip()


def jupyter_command(config: Config) -> list[str] | None:
    """The command that starts JupyterLab, or None: the image has no JupyterLab, or there is
    no token (Jupyter would then serve anyone who reaches the port)."""
    program = config.which("jupyter-lab")
    if program is None:
        log("jupyter.absent", reason="no jupyter-lab on PATH")
        return None
    token = jupyter_token(config)
    if not token:
        log("jupyter.not_started", reason="the access Secret has no jupyter_token")
        return None
    path = jupyter_config_write(config, token)
    return [
        program,
        f"--config={path}",
        "--ip=0.0.0.0",
        f"--port={config.jupyter_port}",
        "--no-browser",
        "--allow-root",
    ]


def jupyter_config_write(config: Config, token: str) -> Path:
    base_url = "/" + config.jupyter_base_url.strip("/") + "/"
    base_url = "/" if base_url == "//" else base_url
    settings = {
        # jupyter_server 2 (JupyterLab 4) reads the token from IdentityProvider; 1.x from
        # ServerApp. Both are set so an operator's older image works alike.
        "IdentityProvider": {"token": token},
        "ServerApp": {"token": token, "base_url": base_url, "root_dir": str(config.home)},
    }
    path = config.state_dir / "jupyter_server_config.json"
    write_atomic(path, json.dumps(settings, indent=2) + "\n", 0o600)
    return path
