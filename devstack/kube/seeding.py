"""The files of emulated images and the platform's system-disk seeding program, as the Kubernetes
API emulator's kubelets play them (a development stand-in: nothing is unpacked or run).

Each image has a root filesystem directory under the data directory (``images/<hash>/``), made on
first use with a small tree that stands for what an image of the platform holds (``/usr/bin``'s
tini and python3, ``/etc/os-release`` naming the image, the init under ``/opt/starverse``, root's
``.bashrc``, dpkg's status file). An init container whose command runs
``starverse-seed-rootfs TARGET DIR...`` (deploy/images/init/bin) copies each ``/DIR`` of its
image to ``TARGET/DIR`` once, marking it done in ``TARGET/.seeded/DIR``, exactly as the real
program does with ``cp -a``: a directory already seeded is left as the tenant changed it.

The platform's init image (deploy/init/Dockerfile) runs ``starverse-tools-install TARGET``,
which copies its toolset into ``TARGET``, a volume (the pod's emptyDir): here a small tree of
the same names (``bin/entrypoint``, ``bin/tini``, ``sbin/sshd``, the launchers, the init
package). As a container runtime does, a container whose command is a path on one of its
volumes starts only if that file is there (``missing_command``): the instance's seeding and
main containers run the toolset's programs, so they run only after the toolset was copied."""

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


TOOLS_PROGRAM = "starverse-tools-install"
TOOLSET = {
    "VERSION": "starverse/init emulated\n",
    "bin/entrypoint": "emulated entrypoint\n",
    "bin/tini": "emulated static tini\n",
    "bin/ssh-keygen": "emulated static ssh-keygen\n",
    "sbin/sshd": "emulated static sshd\n",
    "init/starverse_init/__init__.py": "",
    **{
        f"bin/{name}": f"emulated {name}\n"
        for name in (
            "starverse-init",
            "starverse-init-sh",
            "starverse-preflight",
            "starverse-serve",
            PROGRAM,
            "starverse-save-layer",
            TOOLS_PROGRAM,
        )
    },
}

# what tools_install writes, encoded once (write_bytes skips a text wrapper a file), and the
# directories it makes ("": TARGET itself)
_TOOLSET_BYTES = {relative: text.encode() for relative, text in TOOLSET.items()}
_TOOLSET_DIRS = sorted({posixpath.dirname(relative) for relative in TOOLSET})


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
    resolve = volume_data.resolver(pod, container)
    for name in dirs:
        place = resolve(posixpath.join(target, name))
        marker = resolve(posixpath.join(target, SEEDED, name))
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


def tools_target(container: Obj) -> str | None:
    """TARGET when the container runs the init image's toolset copy, else None."""
    words = [str(w) for w in [*(container.get("command") or []), *(container.get("args") or [])]]
    for index, word in enumerate(words):
        if word.rsplit("/", 1)[-1] == TOOLS_PROGRAM and len(words) > index + 1:
            return words[index + 1]
    return None


def tools_install(volume_data: VolumeData, pod: Obj, container: Obj) -> tuple[int, str]:
    """Run the init image's program: copy the (emulated) toolset into its TARGET volume."""
    target = tools_target(container)
    if target is None:
        return 0, ""
    place = volume_data.resolve(pod, container, target)
    if place is None or place.read_only:
        return 1, f"{TOOLS_PROGRAM}: {target} is not a writable volume"
    for directory in _TOOLSET_DIRS:  # once each, not once a file
        (place.path / directory).mkdir(parents=True, exist_ok=True)
    for relative, data in _TOOLSET_BYTES.items():
        (place.path / relative).write_bytes(data)
    return 0, f"{TOOLS_PROGRAM}: starverse/init emulated into {target}"


def missing_command(volume_data: VolumeData, pod: Obj, container: Obj) -> str | None:
    """The runtime's StartError message when the container's command is a path on one of its
    volumes that holds no such file (as containerd reports an exec that finds nothing), else
    None. A command in the image's own layers is taken to be there."""
    command = [str(w) for w in container.get("command") or []]
    if not command or not command[0].startswith("/"):
        return None
    place = volume_data.resolve(pod, container, command[0])
    if place is None or place.path.is_file():
        return None
    return (
        "failed to create containerd task: failed to create shim task: OCI runtime create "
        f'failed: runc create failed: unable to start container process: exec: "{command[0]}": '
        "stat " + command[0] + ": no such file or directory: unknown"
    )
