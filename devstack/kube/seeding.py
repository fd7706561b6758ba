"""The files of emulated images and the platform's system-disk seeding program, as the Kubernetes
API emulator's kubelets play them (a development stand-in: nothing is unpacked or run).

Each image has a root filesystem directory under the data directory (``images/<hash>/``), made on
first use with a small tree that stands for what an image of the platform holds (``/usr/bin``'s
tini and python3, ``/etc/os-release`` naming the image, the init under ``/opt/starverse``, root's
``.bashrc``, dpkg's status file). An init container whose command runs
``starverse-seed-rootfs TARGET DIR...`` (deploy/images/init/bin) copies each ``/DIR`` of its
image to ``TARGET/DIR`` once, marking it done in ``TARGET/.seeded/DIR``, exactly as the real
program does with ``cp -a``: a directory already seeded is left as the tenant changed it."""

from __future__ import annotations

import hashlib
import posixpath
import shutil
from pathlib import Path
from typing import Any

from .images import normalize
from .volumedata import VolumeData

Obj = dict[str, Any]
PROGRAM = "starverse-seed-rootfs"
SEEDED = ".seeded"
_DEFAULT_TREE = {
    "usr/bin/tini": "emulated tini\n",
    "usr/bin/python3": "emulated python3\n",
    "opt/starverse/bin/starverse-init": "emulated starverse-init\n",
    "root/.bashrc": "# emulated root .bashrc\n",
    "var/lib/dpkg/status": "",
}


def image_root(volume_data: VolumeData, reference: str) -> Path:
    """The emulated image's root filesystem (made with the default tree on first use)."""
    normalized = normalize(reference)
    root = volume_data.root / "images" / hashlib.sha256(normalized.encode()).hexdigest()[:32]
    if not root.exists():
        for relative, text in {
            **_DEFAULT_TREE,
            "etc/os-release": f'PRETTY_NAME="emulated image {normalized}"\n',
        }.items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text)
        (root / "home").mkdir(exist_ok=True)
    return root


def seed_args(container: Obj) -> tuple[str, list[str]] | None:
    """(TARGET, DIRs) when the container runs the seeding program, else None."""
    words = [str(w) for w in [*(container.get("command") or []), *(container.get("args") or [])]]
    for index, word in enumerate(words):
        if word.rsplit("/", 1)[-1] == PROGRAM and len(words) > index + 1:
            return words[index + 1], words[index + 2 :]
    return None


def seed(volume_data: VolumeData, pod: Obj, container: Obj) -> tuple[int, str]:
    """Run the seeding program of an init container: (exit code, its last line)."""
    parsed = seed_args(container)
    if parsed is None:
        return 0, ""
    target, dirs = parsed
    source = image_root(volume_data, str(container.get("image") or ""))
    seeded = []
    for name in dirs:
        place = volume_data.resolve(pod, container, posixpath.join(target, name))
        marker = volume_data.resolve(pod, container, posixpath.join(target, SEEDED, name))
        if place is None or marker is None or place.read_only:
            return 1, f"{PROGRAM}: {target} is not a writable volume"
        if marker.path.exists():
            continue
        if (source / name).is_dir():
            shutil.copytree(source / name, place.path, symlinks=True, dirs_exist_ok=True)
        place.path.mkdir(parents=True, exist_ok=True)
        marker.path.parent.mkdir(parents=True, exist_ok=True)
        marker.path.touch()
        seeded.append(name)
    return 0, f"{PROGRAM}: seeded {' '.join(seeded) or 'nothing (all kept)'}"
