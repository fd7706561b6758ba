"""`starverse-save-layer SOURCE LAYER DIR...`: one image layer of what an instance changed on its
system disk (docs/operator-guide.md, "Saved images"). Run by the save's build pod in an init
container of the instance's own image, with the system disk mounted read-only at SOURCE: each
file, link or directory under SOURCE/DIR that differs from the image's own /DIR goes into the
gzip'd tar LAYER, and each of the image's files the tenant deleted becomes a whiteout
(`.wh.<name>`, the OCI layer format's deletion). Its termination message (/dev/termination-log)
is {"layer_bytes", "files", "deleted"}: what the platform records the image's size from.
Standard library only; reads, never writes, SOURCE."""

import json
import os
import stat
import sys
import tarfile

TERMINATION_LOG = "/dev/termination-log"


def _same(mine: str, theirs: str) -> bool:
    try:
        a, b = os.lstat(mine), os.lstat(theirs)
    except FileNotFoundError:
        return False
    if stat.S_IFMT(a.st_mode) != stat.S_IFMT(b.st_mode) or a.st_mode != b.st_mode:
        return False
    if stat.S_ISLNK(a.st_mode):
        return os.readlink(mine) == os.readlink(theirs)
    if not stat.S_ISREG(a.st_mode):
        return True
    if a.st_size != b.st_size:
        return False
    with open(mine, "rb") as left, open(theirs, "rb") as right:
        while True:
            chunk = left.read(1 << 20)
            if chunk != right.read(1 << 20):
                return False
            if not chunk:
                return True


def layer(source: str, target: str, dirs: "list[str]", root: str = "/") -> "dict[str, int]":
    counts = {"layer_bytes": 0, "files": 0, "deleted": 0}
    with tarfile.open(target, "w:gz") as tar:
        for name in dirs:
            top = os.path.join(source, name)
            for here, subdirs, files in os.walk(top):
                relative = os.path.relpath(here, source)
                for entry in sorted(subdirs) + sorted(files):
                    mine = os.path.join(here, entry)
                    inside = os.path.join(relative, entry)
                    if _same(mine, os.path.join(root, inside)):
                        continue
                    tar.add(mine, arcname=inside, recursive=False)
                    if not os.path.isdir(mine) or os.path.islink(mine):
                        counts["files"] += 1
                        counts["layer_bytes"] += os.lstat(mine).st_size
            for here, subdirs, files in os.walk(os.path.join(root, name)):
                relative = os.path.relpath(here, root)
                for entry in subdirs + files:
                    if not os.path.lexists(os.path.join(source, relative, entry)):
                        whiteout = tarfile.TarInfo(os.path.join(relative, ".wh." + entry))
                        tar.addfile(whiteout)
                        counts["deleted"] += 1
                subdirs[:] = [
                    d for d in subdirs if os.path.lexists(os.path.join(source, relative, d))
                ]
    counts["layer_bytes"] = os.path.getsize(target)
    return counts


def main(argv: "list[str] | None" = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3:
        print("usage: starverse-save-layer SOURCE LAYER DIR...", file=sys.stderr)
        return 64
    counts = layer(args[0], args[1], args[2:])
    message = json.dumps(counts)
    print("starverse-save-layer: " + message)
    try:
        with open(TERMINATION_LOG, "w") as log:
            log.write(message)
    except OSError:
        pass  # not in a pod
    return 0
