"""The init package's `starverse-save-layer` (starverse_init/savelayer.py), run on real
directories: what the system disk changed from the image's own directories becomes one gzip'd
tar layer (new and changed files, new directories), the image's files it deleted whiteouts; the
unchanged are left out; its counts are the termination message."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

INIT = Path(__file__).resolve().parents[2] / "deploy" / "images" / "init"
sys.path.insert(0, str(INIT))

from starverse_init.savelayer import layer  # noqa: E402


def _tree(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)


def test_only_what_changed_goes_into_the_layer_with_whiteouts(tmp_path):
    image, disk = tmp_path / "image", tmp_path / "disk"
    base = {"usr/bin/python3": "py", "etc/os-release": "ubuntu", "etc/gone.conf": "x"}
    _tree(image, base)
    _tree(disk, {**base, "etc/os-release": "changed"})
    (disk / "etc/gone.conf").unlink()
    _tree(disk, {"usr/lib/pkg/__init__.py": "v = 2\n"})
    target = tmp_path / "layer.tar.gz"

    counts = layer(str(disk), str(target), ["usr", "etc"], root=str(image))

    with tarfile.open(target) as tar:
        names = sorted(tar.getnames())
        assert tar.extractfile("etc/os-release").read() == b"changed"  # type: ignore[union-attr]
    assert names == [
        "etc/.wh.gone.conf",
        "etc/os-release",
        "usr/lib",
        "usr/lib/pkg",
        "usr/lib/pkg/__init__.py",
    ]
    assert counts == {"layer_bytes": target.stat().st_size, "files": 2, "deleted": 1}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from starverse_init import savelayer; "
        "sys.exit(savelayer.main(sys.argv[2:]))"
    )
    return subprocess.run(
        [sys.executable, "-I", "-c", code, str(INIT), *args], capture_output=True, text=True
    )


def test_the_program_prints_its_counts_and_needs_its_arguments(tmp_path):
    (tmp_path / "disk" / "usr").mkdir(parents=True)
    usage = _run("/x")
    assert usage.returncode == 64 and "usage: starverse-save-layer" in usage.stderr

    done = _run(str(tmp_path / "disk"), str(tmp_path / "l.tgz"), "usr")

    assert done.returncode == 0
    printed = json.loads(done.stdout.split(": ", 1)[1])
    # against this machine's own /usr: the empty disk deleted each of its entries
    assert (printed["files"], printed["deleted"]) == (0, len(os.listdir("/usr")))
    assert printed["layer_bytes"] == (tmp_path / "l.tgz").stat().st_size
