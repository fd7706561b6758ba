"""Saving an instance as an image, as the Kubernetes API emulator's kubelets play it (a
development stand-in: nothing is tarred, compressed or sent over a network).

The platform's build pod (instances.provisioning.saving) has two steps:

* an init container of the base image runs ``starverse-save-layer SOURCE LAYER DIR...``
  (deploy/images/init/bin): the files of ``SOURCE/DIR`` (the system disk, mounted read-only)
  that differ from the image's own ``/DIR`` become one layer at ``LAYER``, files the tenant
  deleted become whiteouts (``.wh.<name>``); its termination message is
  ``{"layer_bytes": N, "files": F, "deleted": D}``. Emulated, the layer is a directory tree at
  ``LAYER`` (copies, holes kept) and the base's files are the emulated image's
  (:func:`.seeding.image_root`).
* a container runs ``crane append --base BASE --new_layer LAYER --new_tag TARGET`` (or ``-b``,
  ``-f``, ``-t``), which pushes ``BASE``'s layers plus ``LAYER`` as ``TARGET``. Emulated, the
  registry model (:class:`.images.ImageCatalog`) records ``TARGET``'s layers and size (a node
  that pulls it takes size ÷ its bandwidth), ``TARGET``'s root filesystem becomes the base's
  with the layer applied (so the system disk of an instance of it is seeded from it), and the
  container runs for the layer's bytes ÷ the registry's bandwidth, then exits 0.

  When the emulator is told of a real registry (``--registry http://127.0.0.1:5000``, as
  ``make run`` passes the registry it starts: :attr:`.images.ImageCatalog.registry_url`) and
  ``TARGET`` names its host:port, the push is also real: a thread tars and gzips ``LAYER``
  and pushes ``TARGET`` to that registry over the OCI distribution API (:mod:`.oci`: blobs,
  an image config with the layers' diff_ids, an OCI manifest), and the container ends when
  both the modelled time has passed and the push is done (exit 1 with the registry's answer
  when it failed). A base in the same registry has its layers mounted and kept; a base
  elsewhere is not copied but named by the manifest's ``org.opencontainers.image.base.name``
  annotation, its layers recorded by the model only (so such an image in the registry holds
  the tenant's layer alone). Without ``--registry`` nothing leaves the emulator.
"""

from __future__ import annotations

import itertools
import json
import os
import posixpath
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import oci
from .images import ImageCatalog
from .seeding import image_root
from .volumedata import VolumeData

Obj = dict[str, Any]
LAYER_PROGRAM = "starverse-save-layer"
WHITEOUT = ".wh."


def _words(container: Obj) -> list[str]:
    return [str(w) for w in [*(container.get("command") or []), *(container.get("args") or [])]]


def layer_args(container: Obj) -> tuple[str, str, list[str]] | None:
    """(SOURCE, LAYER, DIRs) when the container runs the layer program, else None."""
    words = _words(container)
    for index, word in enumerate(words):
        if word.rsplit("/", 1)[-1] == LAYER_PROGRAM and len(words) > index + 2:
            return words[index + 1], words[index + 2], words[index + 3 :]
    return None


def _copy(source: Path, target: Path) -> None:
    """A file or link copied with its mode and times, holes kept (a large sparse file the
    tenant wrote costs no disk here)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(  # noqa: S603 - fixed program, paths of the emulator's own directories
        ["cp", "-a", "--sparse=always", "--reflink=auto", str(source), str(target)],  # noqa: S607
        check=True,
    )


def _differs(mine: Path, base: Path) -> bool:
    if mine.is_symlink() or base.is_symlink():
        return not (mine.is_symlink() and base.is_symlink()) or os.readlink(mine) != os.readlink(
            base
        )
    if not base.is_file() or mine.stat().st_size != base.stat().st_size:
        return True
    return mine.read_bytes() != base.read_bytes()


def _diff_dir(source: Path, base: Path, layer: Path) -> tuple[int, int, int]:
    """Copy what ``source`` changed from ``base`` into ``layer``: (bytes, files, deleted)."""
    size = files = deleted = 0
    for directory, _dirs, names in os.walk(source):
        here = Path(directory)
        for name in names:
            mine = here / name
            relative = mine.relative_to(source)
            if _differs(mine, base / relative):
                _copy(mine, layer / relative)
                size += mine.lstat().st_size
                files += 1
    for directory, _dirs, names in os.walk(base):
        for name in names:
            relative = (Path(directory) / name).relative_to(base)
            if not os.path.lexists(source / relative):
                whiteout = layer / relative.parent / f"{WHITEOUT}{name}"
                whiteout.parent.mkdir(parents=True, exist_ok=True)
                whiteout.touch()
                deleted += 1
    return size, files, deleted


def save_layer(volume_data: VolumeData, pod: Obj, container: Obj) -> tuple[int, str]:
    """Run the layer program of an init container: (exit code, its termination message)."""
    parsed = layer_args(container)
    if parsed is None:
        return 0, ""
    source, target, dirs = parsed
    base = image_root(volume_data, str(container.get("image") or ""))
    layer = volume_data.resolve(pod, container, target)
    if layer is None or layer.read_only:
        return 1, f"{LAYER_PROGRAM}: {target} is not a writable volume"
    if layer.path.exists():  # a step run again starts its layer afresh
        shutil.rmtree(layer.path)
    layer.path.mkdir(parents=True)
    totals = [0, 0, 0]
    for name in dirs:
        place = volume_data.resolve(pod, container, posixpath.join(source, name))
        if place is None:
            return 1, f"{LAYER_PROGRAM}: {source} is not a volume"
        if not place.path.is_dir():
            continue
        counted = _diff_dir(place.path, base / name, layer.path / name)
        totals = [a + b for a, b in zip(totals, counted, strict=True)]
    layer_bytes, files, deleted = totals
    return 0, json.dumps({"layer_bytes": layer_bytes, "files": files, "deleted": deleted})


@dataclass(frozen=True)
class PushArgs:
    base: str
    layer: str
    target: str


_FLAGS = {"--base": "base", "-b": "base", "--new_layer": "layer", "-f": "layer"}
_FLAGS |= {"--new_tag": "target", "-t": "target"}


def push_args(container: Obj) -> PushArgs | None:
    """``crane append``'s base, layer and new tag when the container runs it, else None."""
    words = _words(container)
    for index, word in enumerate(words[:-1]):
        if word.rsplit("/", 1)[-1] == "crane" and words[index + 1] == "append":
            found: dict[str, str] = {}
            rest = words[index + 2 :]
            for flag, value in itertools.pairwise(rest):
                if flag in _FLAGS:
                    found[_FLAGS[flag]] = value
            if len(found) == 3:
                return PushArgs(found["base"], found["layer"], found["target"])
    return None


def _apply(layer: Path, root: Path) -> None:
    """Apply a layer to a root filesystem: whiteouts remove, files replace (hard links: the
    layer is the build pod's own copy, so the image keeps its files when the pod goes)."""
    for directory, _dirs, names in os.walk(layer):
        here = Path(directory)
        for name in names:
            relative = (here / name).relative_to(layer)
            if name.startswith(WHITEOUT):
                gone = root / relative.parent / name[len(WHITEOUT) :]
                if gone.is_dir() and not gone.is_symlink():
                    shutil.rmtree(gone)
                elif os.path.lexists(gone):
                    gone.unlink()
                continue
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(target):
                target.unlink()
            os.link(here / name, target, follow_symlinks=False)


def _layer_bytes(layer: Path) -> int:
    return sum(
        (Path(d) / n).lstat().st_size
        for d, _dirs, names in os.walk(layer)
        for n in names
        if not n.startswith(WHITEOUT)
    )


@dataclass
class RealPush:
    """A push to the real registry in a thread of its own (the kubelet's loop never waits on
    the network): done when ``finished`` is set, ``error`` the registry's refusal, if any."""

    finished: threading.Event = field(default_factory=threading.Event)
    digest: str = ""
    error: str = ""

    @classmethod
    def start(cls, registry: oci.Registry, base: str, layer: Path, target: str) -> RealPush:
        real = cls()

        def run() -> None:
            try:
                real.digest = oci.append(registry, base, layer, target)
            except (oci.PushError, OSError, ValueError, KeyError) as error:
                real.error = f"Error: pushing {target}: {error}"
            finally:
                real.finished.set()

        threading.Thread(target=run, name=f"crane-append {target}", daemon=True).start()
        return real


@dataclass
class PushRun:
    """One emulated ``crane append``: done (exit 0, or 1 when its layer was missing or the real
    registry refused it) at ``next_due`` and, with a real registry, once its push is done; the
    same interface as :class:`.trainer.TrainerRun` for the kubelet."""

    next_due: float
    code: int
    line: str
    exit_code: int | None = None
    real: RealPush | None = None

    def advance(self, now: float) -> list[str]:
        if self.exit_code is not None or now < self.next_due:
            return []
        if self.real is not None:
            if not self.real.finished.is_set():
                return []
            if self.real.error:
                self.exit_code = 1
                return [self.real.error]
            self.exit_code = self.code
            return [f"{self.line}; pushed to the registry as {self.real.digest}"]
        self.exit_code = self.code
        return [self.line]


def push(
    volume_data: VolumeData, images: ImageCatalog, pod: Obj, container: Obj, now: float
) -> PushRun | None:
    """Start the push of a container that runs ``crane append`` (None: it runs something
    else): the registry model and the image's files are updated at once, the container ends
    after the layer's bytes ÷ the registry's bandwidth (and, with a real registry, once the
    layer is pushed there too)."""
    args = push_args(container)
    if args is None:
        return None
    layer = volume_data.resolve(pod, container, args.layer)
    if layer is None or not layer.path.is_dir():
        return PushRun(now, 1, f"Error: opening layer {args.layer}: no such file or directory")
    layer_bytes = _layer_bytes(layer.path)
    size = images.push(args.target, args.base, layer_bytes)
    root = image_root(volume_data, args.target)
    shutil.rmtree(root)
    shutil.copytree(image_root(volume_data, args.base), root, symlinks=True)
    _apply(layer.path, root)
    seconds = layer_bytes / (images.push_mbps * 1e6)
    line = f"{args.target}: pushed {layer_bytes} bytes on {args.base} ({size} bytes in all)"
    real = None
    if images.registry_url:
        registry = oci.Registry(images.registry_url)
        if registry.serves(oci.Target.parse(args.target).host):
            real = RealPush.start(registry, args.base, layer.path, args.target)
        else:
            line += f" (the model only: the registry {registry.host} is not {args.target}'s)"
    return PushRun(now + seconds, 0, line, real=real)
