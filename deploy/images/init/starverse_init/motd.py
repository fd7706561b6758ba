"""The message of the day sshd prints at log-in: the GPUs, the disks, the public pool, where
the balance is, and what happens on stop."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from starverse_init.config import Config
from starverse_init.files import write_atomic


def gpu_lines(config: Config) -> list[str]:
    program = config.which("nvidia-smi")
    if program is None:
        return ["  (nvidia-smi is not in this image)"]
    try:
        result = subprocess.run(
            [program, "-L"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=15,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ["  (nvidia-smi did not answer)"]
    lines = [f"  {line.strip()}" for line in result.stdout.splitlines() if line.strip()]
    return lines or ["  (no GPU visible)"]


def _size(path: Path) -> str:
    stat = os.statvfs(str(path))
    total = stat.f_blocks * stat.f_frsize
    free = stat.f_bavail * stat.f_frsize
    return f"{_gb(total - free)} of {_gb(total)} used"


def _gb(size: int) -> str:
    return f"{size / 1e9:.0f} GB" if size >= 1e9 else f"{size / 1e6:.0f} MB"


def _shown(config: Config, path: Path) -> str:
    """The path as a user inside the container sees it."""
    return "/" + str(path.relative_to(config.root)).lstrip("./")


def disk_lines(config: Config) -> list[str]:
    found = []
    if config.disk.is_dir():
        found.append((config.disk, "instance disk, kept across stop and start"))
    if config.mnt.is_dir():
        for path in sorted(config.mnt.iterdir()):
            if path.is_dir():
                found.append((path, "cloud disk"))
    if config.nas.is_dir():
        found.append((config.nas, "shared NAS of your account"))
    return [f"  {_shown(config, path):<22} {label}, {_size(path)}" for path, label in found] or [
        "  (no disk mounted)"
    ]


def motd(config: Config) -> str:
    lines = [f"Starverse instance {config.instance_id}".rstrip(), "", "GPUs:"]
    lines += gpu_lines(config)
    lines += ["", "Disks:"]
    lines += disk_lines(config)
    if config.public.is_dir():
        lines += [
            "",
            f"Public datasets and models (read-only): {_shown(config, config.public)}/data, "
            f"{_shown(config, config.public)}/models",
        ]
    if config.balance_url:
        lines += ["", f"Balance and top-ups: {config.balance_url}"]
    lines += [
        "",
        f"On stop, the executables in {_shown(config, config.hooks_dir)}/ run in name order "
        f"({config.stop_deadline_s:.0f} s in all), e.g. to write a last checkpoint.",
        "",
    ]
    return "\n".join(lines)


def motd_write(config: Config) -> None:
    write_atomic(config.etc / "motd", motd(config), 0o644)
