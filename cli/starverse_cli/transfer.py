"""`starverse cp`: files and folders to and from an instance over its SSH, the host key pinned
(sshpin), resumable.

rsync when this computer and the instance both have it (the catalogue's images do): `rsync -a
--partial-dir=.starverse-partial` through the pinned ssh. A copy that breaks off keeps what
arrived in `.starverse-partial/` beside the destination (never under the file's own name, so a
half file is never taken for the whole), and the next run uses it as the basis of rsync's delta
transfer: only the missing part crosses the network, plus rsync's block checksums. Not
`--append-verify`: it skips every destination file at least as long as its source, so a file
changed to the same size or shorter would silently stay old, while the delta transfer resumes
as cheaply and stays right for changed files.

Without rsync on either end (a brought image without it, a computer without it) the copy runs
over plain ssh with POSIX tools on the instance (`sh`, `cat`, `tail -c`, `find`, `sha256sum`):
each file is written to `NAME.starverse-part` and renamed once whole; a later run goes on from
the part's size when the SHA-256 of that prefix is the same on both ends (else it starts over),
and skips a file already there with the same size and SHA-256. It opens one ssh connection per
file, so rsync is faster for many small files."""

from __future__ import annotations

import hashlib
import os
import posixpath
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from starverse_cli import sshpin

PARTIAL_DIR = ".starverse-partial"
PART_SUFFIX = ".starverse-part"
HOME = "/root"
# Where a copy may land: the system disk's directories (kept across stops, docs: "Environments
# and images"), /tmp (emptied at a stop), plus the instance's cloud disks (/mnt/NAME) and the NAS.
SYSTEM_DIRS = ("/root", "/home", "/usr", "/etc", "/opt", "/var", "/tmp")  # noqa: S108 - on the instance
CHUNK = 1 << 20
# rsync's exit statuses: the connection or the remote end went away (run again to resume)
RSYNC_BROKEN = {10, 12, 30, 35, 255}
RSYNC_INTERRUPTED = 20

FAILED, BROKEN, REFUSED, INTERRUPTED = "failed", "broken", "refused", "interrupted"


class TransferError(Exception):
    """A copy that did not finish: `kind` is FAILED (the instance or a path said no), BROKEN
    (the connection went: run again to resume), REFUSED (the key was not accepted) or
    INTERRUPTED (Ctrl-C)."""

    def __init__(self, message: str, kind: str = FAILED) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Location:
    """One argument of `cp`: a local path (`instance` None) or INSTANCE:PATH."""

    instance: str | None
    path: str


def location(text: str) -> Location:
    """scp's rule: a colon before any slash names an instance (`ins_…:/root/data`, `train-1:x`);
    a local name with a colon is written `./a:b`."""
    head, colon, rest = text.partition(":")
    drive = os.name == "nt" and len(head) == 1  # C:\data is a local path on Windows
    if colon and head and "/" not in head and "\\" not in head and not drive:
        return Location(head, rest)
    return Location(None, text)


def remote_path(path: str) -> str:
    """The absolute path on the instance: a relative one is under root's home (as scp's), `..`
    resolved; a trailing slash is kept (it means the folder's contents, as rsync reads it)."""
    full = path if path.startswith("/") else f"{HOME}/{path}"
    normal = "/" + posixpath.normpath(full).lstrip("/")
    return normal + "/" if full.endswith("/") and normal != "/" else normal


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


KEPT_WORDS = (
    "/root/data, the system disk (/root, /home, /opt, /usr, /etc, /var), a cloud disk "
    "(/mnt/NAME) or the NAS (/nas)"
)


def destination_problem(path: str, mounts: Sequence[str], nas: bool | None) -> str | None:
    """Why files may not be written to `path` on the instance, or None. `mounts`: its cloud
    disks' mount paths; `nas`: whether the account has a NAS (None: not asked)."""
    normal = posixpath.normpath(path)
    if _under(normal, "/public"):
        return f"{path} is in the public pool, which is read-only: copy to {KEPT_WORDS}"
    if any(_under(normal, root) for root in (*SYSTEM_DIRS, *mounts)):
        return None
    if _under(normal, "/nas"):
        if nas is False:
            return (
                "you have no shared NAS: create one on the console's Disks page "
                "(or PUT /api/v1/nas) and start the instance again, or copy elsewhere"
            )
        return None
    if _under(normal, "/mnt"):
        held = ", ".join(mounts) or "none"
        return (
            f"no cloud disk of this instance is mounted at {path} (its cloud disks: {held}); "
            "attach one with `starverse disks attach DISK INSTANCE --restart`"
        )
    return f"{path} is not kept on the instance (the image's own files): copy to {KEPT_WORDS}"


@dataclass(frozen=True)
class Remote:
    """How to reach the instance: its pinned SSH address and the user's ssh choices."""

    host: str
    port: int
    user: str
    known_hosts: Path
    identity: str | None = None
    options: tuple[str, ...] = ()
    program: str = "ssh"

    def ssh(self) -> list[str]:
        return [
            self.program,
            *sshpin.ssh_options(
                port=self.port,
                known_hosts=self.known_hosts,
                identity=self.identity,
                options=self.options,
            ),
        ]

    def argv(self, command: str) -> list[str]:
        return [*self.ssh(), "--", f"{self.user}@{self.host}", command]

    def target(self, path: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{path}"


@dataclass
class Outcome:
    """What a copy did: its transport, and for the ssh one the files and bytes sent."""

    transport: str
    files: int | None = None
    skipped: int | None = None
    sent_bytes: int | None = None
    notes: list[str] = field(default_factory=list)


def _ssh_failure(stderr: str) -> TransferError:
    text = stderr.strip()
    if "Permission denied" in text:
        return TransferError(
            "the instance did not accept your SSH key: add its public key with `starverse keys "
            "add` (a running instance takes it within a minute) or name the private key with -i",
            REFUSED,
        )
    if "Host key verification failed" in text or "REMOTE HOST IDENTIFICATION" in text:
        return TransferError("the instance's host key is not the pinned one: refusing to copy")
    last = text.splitlines()[-1] if text else "ssh failed"
    return TransferError(
        f"the SSH connection to the instance failed ({last}): run the same command again "
        "and only what is missing is sent",
        BROKEN,
    )


def _run(remote: Remote, command: str, script: bytes = b"") -> bytes:
    """A command on the instance; its stdout. ssh's own failure (255) says why; another
    status carries the remote's message."""
    done = subprocess.run(  # noqa: S603 - argv from the API and the user, no shell here
        remote.argv(command), input=script, capture_output=True, check=False
    )
    if done.returncode == 255:
        raise _ssh_failure(done.stderr.decode(errors="replace"))
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        raise TransferError(f"on the instance: {message}")
    return done.stdout


def local_rsync() -> str | None:
    return shutil.which(os.environ.get("STARVERSE_RSYNC", "rsync"))


def _sha256(path: Path, length: int) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        left = length
        while left > 0:
            block = source.read(min(CHUNK, left))
            if not block:
                break
            digest.update(block)
            left -= len(block)
    return digest.hexdigest()


def _remote_sha256(remote: Remote, path: str, length: int | None = None) -> str | None:
    """SHA-256 of a remote file (its first `length` bytes); None where the instance cannot say."""
    q = shlex.quote(path)
    reading = f"head -c {length} < {q}" if length is not None else f"cat < {q}"
    try:
        out = _run(remote, f"{reading} | sha256sum").decode().split()
    except TransferError as error:
        if error.kind in (BROKEN, REFUSED):
            raise
        return None
    return out[0] if out else None


def _rsync(
    rsync: str, remote: Remote, sources: Sequence[str], dest: str, progress: bool
) -> Outcome:
    argv = [
        rsync,
        "-a",
        "--no-owner",
        "--no-group",
        f"--partial-dir={PARTIAL_DIR}",
        *(["--progress"] if progress else []),
        "-e",
        shlex.join(remote.ssh()),
        *sources,
        dest,
    ]
    try:
        done = subprocess.run(  # noqa: S603 - argv, no shell
            argv,
            stdin=subprocess.DEVNULL,
            stdout=2 if progress else subprocess.DEVNULL,  # progress to stderr
            stderr=subprocess.PIPE,
            check=False,
        )
    except KeyboardInterrupt as stop:
        raise TransferError("interrupted: run it again to go on", INTERRUPTED) from stop
    stderr = done.stderr.decode(errors="replace")
    if done.returncode == 0:
        return Outcome("rsync")
    if done.returncode == RSYNC_INTERRUPTED:
        raise TransferError("interrupted: run it again to go on", INTERRUPTED)
    if "Permission denied (publickey" in stderr or "Host key verification failed" in stderr:
        raise _ssh_failure(stderr)
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    reason = "; ".join(lines[-3:]) or f"rsync exit status {done.returncode}"
    if done.returncode in RSYNC_BROKEN:
        raise TransferError(
            f"the copy broke off ({reason}): run the same command again and only what is "
            f"missing is sent (what arrived waits in {PARTIAL_DIR}/)",
            BROKEN,
        )
    raise TransferError(f"rsync could not copy everything: {reason}")


def _probe(remote: Remote, prepare: str) -> tuple[bool, bool]:
    """(rsync on the instance, `prepare`'s test true) in one connection, which also proves the
    key and the host key before any data moves."""
    out = _run(
        remote,
        f"{prepare} && if command -v rsync >/dev/null 2>&1; then echo rsync; else echo none; fi",
    ).decode()
    words = out.split()
    return "rsync" in words, "yes" in words


def upload(
    remote: Remote,
    sources: Sequence[str],
    dest: str,
    *,
    use_rsync: bool = True,
    progress: bool = False,
    err: TextIO | None = None,
) -> Outcome:
    """Local `sources` (files, folders; a trailing slash: the folder's contents) to `dest`, an
    absolute path on the instance, as rsync places them."""
    for source in sources:
        if not os.path.lexists(source):
            raise TransferError(f"{source}: no such file or folder here")
    as_folder = dest.endswith("/") or len(sources) > 1 or any(os.path.isdir(s) for s in sources)
    base = dest.rstrip("/") or "/"
    made = base if as_folder else posixpath.dirname(base)
    q = shlex.quote
    has_rsync, is_dir = _probe(
        remote, f"mkdir -p {q(made)} && if [ -d {q(base)} ]; then echo yes; else echo no; fi"
    )
    rsync = local_rsync() if use_rsync else None
    if rsync and has_rsync:
        return _rsync(rsync, remote, list(sources), remote.target(dest), progress)
    plan: list[tuple[Path, str]] = []
    folders: list[str] = []
    for source in sources:
        local = Path(source)
        if local.is_dir():
            top = base if source.endswith(("/", os.sep)) else posixpath.join(base, local.name)
            folders.append(top)
            for directory, subdirs, names in os.walk(local):
                rel = Path(directory).relative_to(local).as_posix()
                here = top if rel == "." else posixpath.join(top, rel)
                folders += [posixpath.join(here, name) for name in sorted(subdirs)]
                plan += [(Path(directory) / name, posixpath.join(here, name)) for name in names]
        else:
            into = as_folder or is_dir
            plan.append((local, posixpath.join(base, local.name) if into else base))
    return _stream_up(remote, plan, folders, err)


@dataclass(frozen=True)
class _File:
    """One file of a copy over plain ssh: `source` (read: a local path uploading, a path on the
    instance downloading), `size` bytes, to `target` on the other end; `there` and `part`: the
    sizes found of the target and of its part (PART_SUFFIX), -1 where there is none."""

    source: str
    target: str
    size: int
    there: int
    part: int


def _stream_up(
    remote: Remote, plan: list[tuple[Path, str]], folders: list[str], err: TextIO | None
) -> Outcome:
    q = shlex.quote
    lines = [f"mkdir -p {q(folder)}" for folder in folders]
    for _local, target in plan:
        for path in (target, target + PART_SUFFIX):
            lines.append(
                f"if [ -f {q(path)} ]; then echo $(($(wc -c < {q(path)}))); else echo -1; fi"
            )
    sizes = [int(word) for word in _run(remote, "sh -s", "\n".join(lines).encode()).split()]
    files = [
        _File(str(local), target, local.stat().st_size, sizes[2 * index], sizes[2 * index + 1])
        for index, (local, target) in enumerate(plan)
    ]
    return _stream(remote, files, up=True, err=err)


def _stream(remote: Remote, files: list[_File], *, up: bool, err: TextIO | None) -> Outcome:
    """Copy `files` over plain ssh, to the instance (`up`) or from it: a file already whole on
    the receiving end (its size and SHA-256 the source's) is skipped; a part whose SHA-256 is
    that of the source's prefix of its length goes on from its end, else the file starts over;
    each is written to its part and renamed once whole."""
    outcome = Outcome("ssh", files=0, skipped=0, sent_bytes=0)
    for file in files:
        if file.there == file.size and _digest(
            remote, file.target, file.size, on_instance=up, whole=True
        ) == _digest(remote, file.source, file.size, on_instance=not up, whole=True):
            outcome.skipped = (outcome.skipped or 0) + 1
            continue
        offset = 0
        part = file.target + PART_SUFFIX
        if 0 < file.part <= file.size and _digest(
            remote, part, file.part, on_instance=up
        ) == _digest(remote, file.source, file.part, on_instance=not up):
            offset = file.part
        moved = _put(remote, file, offset) if up else _get(remote, file, offset)
        _tally(outcome, err, file.target, moved, offset, "sent" if up else "received")
    return outcome


def _digest(
    remote: Remote, path: str, length: int, *, on_instance: bool, whole: bool = False
) -> str | None:
    """SHA-256 of the first `length` bytes of `path`, here or on the instance (`whole`: all of
    a file `length` long, which the instance reads to its end)."""
    if on_instance:
        return _remote_sha256(remote, path, None if whole else length)
    return _sha256(Path(path), length)


def _put(remote: Remote, file: _File, offset: int) -> int:
    """Upload one file from `offset` into its part, renamed to the target once whole."""
    q = shlex.quote
    partial = q(file.target + PART_SUFFIX)
    command = (
        f"cat {'>>' if offset else '>'} {partial} && "
        f'[ "$(($(wc -c < {partial})))" -eq {file.size} ] && mv -f {partial} {q(file.target)}'
    )
    return _send(remote, command, Path(file.source), offset)


def _tally(
    outcome: Outcome, err: TextIO | None, target: object, moved: int, offset: int, verb: str
) -> None:
    """One file more in `outcome`, its bytes counted, and said on `err` (from where it resumed)."""
    outcome.files = (outcome.files or 0) + 1
    outcome.sent_bytes = (outcome.sent_bytes or 0) + moved
    if err is not None:
        start = f" (resumed at byte {offset})" if offset else ""
        err.write(f"{target}: {moved} bytes {verb}{start}\n")


def _stopped(process: subprocess.Popen[bytes]) -> TransferError:
    """Ctrl-C: ssh killed; what to tell (the next run goes on from what arrived)."""
    process.kill()
    process.wait()
    return TransferError("interrupted: run it again to go on", INTERRUPTED)


def _ended(process: subprocess.Popen[bytes]) -> tuple[int, str]:
    """The remote command's exit status and what it said on stderr; ssh's own failure (255)
    raised as one."""
    assert process.stderr is not None
    stderr = process.stderr.read().decode(errors="replace")
    code = process.wait()
    if code == 255:
        raise _ssh_failure(stderr)
    return code, stderr


def _send(remote: Remote, command: str, local: Path, offset: int) -> int:
    """Stream `local` from `offset` into the remote `command`'s stdin; the bytes sent."""
    process = subprocess.Popen(  # noqa: S603 - argv, no shell here
        remote.argv(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stderr is not None
    sent = 0
    try:
        with local.open("rb") as source:
            source.seek(offset)
            while block := source.read(CHUNK):
                process.stdin.write(block)
                sent += len(block)
        process.stdin.close()
    except BrokenPipeError:
        pass
    except KeyboardInterrupt as stop:
        raise _stopped(process) from stop
    code, stderr = _ended(process)
    if code != 0:
        missing = stderr.strip() or "the file did not arrive whole"
        raise TransferError(
            f"the copy of {local} broke off ({missing}): run the same command again and only "
            "what is missing is sent",
            BROKEN,
        )
    return sent


LIST_TREE = (
    'for s; do if [ -d "$s" ]; then '
    "find \"$s\" -type d -exec printf 'd 0 %s\\0' {} +; "
    'find "$s" -type f -exec sh -c '
    '\'for f; do printf "f %s %s\\0" $(($(wc -c < "$f"))) "$f"; done\' sh {} +; '
    'elif [ -f "$s" ]; then printf \'f %s %s\\0\' $(($(wc -c < "$s"))) "$s"; '
    "else printf 'missing 0 %s\\0' \"$s\"; fi; done"
)


def download(
    remote: Remote,
    sources: Sequence[str],
    dest: str,
    *,
    use_rsync: bool = True,
    progress: bool = False,
    err: TextIO | None = None,
) -> Outcome:
    """`sources` on the instance (absolute; a trailing slash: the folder's contents) to the
    local `dest`, as rsync places them."""
    q = shlex.quote
    has_rsync, _ = _probe(remote, "true")
    rsync = local_rsync() if use_rsync else None
    if rsync and has_rsync:
        for source in sources:
            _run(remote, f"[ -e {q(source)} ] || {{ echo {q(source)}: no such file >&2; exit 1; }}")
        if dest.endswith(("/", os.sep)) or len(sources) > 1:
            Path(dest).mkdir(parents=True, exist_ok=True)
        return _rsync(rsync, remote, [remote.target(s) for s in sources], dest, progress)
    return _stream_down(remote, sources, dest, err)


def _stream_down(remote: Remote, sources: Sequence[str], dest: str, err: TextIO | None) -> Outcome:
    q = shlex.quote
    listing = _run(remote, f"sh -c {q(LIST_TREE)} sh {' '.join(q(s) for s in sources)}")
    entries = [item.decode(errors="surrogateescape") for item in listing.split(b"\0") if item]
    dirs: list[str] = []
    files: list[tuple[str, int]] = []
    for entry in entries:
        kind, length, path = entry.split(" ", 2)
        if kind == "missing":
            raise TransferError(f"on the instance: {path}: no such file or folder")
        if kind == "d":
            dirs.append(path)
        else:
            files.append((path, int(length)))
    folder_source = any(path.rstrip("/") in {s.rstrip("/") for s in sources} for path in dirs)
    base = Path(dest)
    as_folder = dest.endswith(("/", os.sep)) or len(sources) > 1 or folder_source or base.is_dir()

    def local_of(path: str) -> Path:
        for source in sources:
            root = source.rstrip("/") or "/"
            if path == root and not any(d == root for d in dirs):
                return base / posixpath.basename(root) if as_folder else base
            if _under(path, root):
                rel = posixpath.relpath(path, root)
                top = base if source.endswith("/") else base / posixpath.basename(root)
                return top if rel == "." else top / rel
        raise TransferError(f"on the instance: {path} is outside what was asked")

    for directory in dirs:
        local_of(directory).mkdir(parents=True, exist_ok=True)
    if as_folder:
        base.mkdir(parents=True, exist_ok=True)
    plan = [(path, size, local_of(path)) for path, size in files]
    return _stream(
        remote,
        [
            _File(path, str(target), size, _size_of(target), _size_of(_part_of(target)))
            for path, size, target in plan
        ],
        up=False,
        err=err,
    )


def _size_of(path: Path) -> int:
    return path.stat().st_size if path.is_file() else -1


def _part_of(target: Path) -> Path:
    return target.with_name(target.name + PART_SUFFIX)


def _get(remote: Remote, file: _File, offset: int) -> int:
    """Download one file from `offset` into its part, renamed to the target once whole."""
    target = Path(file.target)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = _part_of(target)
    got = _receive(remote, f"tail -c +{offset + 1} < {shlex.quote(file.source)}", partial, offset)
    if partial.stat().st_size != file.size:
        raise TransferError(
            f"the copy of {file.source} broke off: run the same command again and only what is "
            "missing is sent",
            BROKEN,
        )
    os.replace(partial, target)
    return got


def _receive(remote: Remote, command: str, partial: Path, offset: int) -> int:
    """Append the remote `command`'s stdout to `partial` (cut to `offset` first)."""
    process = subprocess.Popen(  # noqa: S603 - argv, no shell here
        remote.argv(command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    got = 0
    try:
        with partial.open("r+b" if offset else "wb") as sink:
            sink.truncate(offset)
            sink.seek(offset)
            while block := process.stdout.read(CHUNK):
                sink.write(block)
                got += len(block)
    except KeyboardInterrupt as stop:
        raise _stopped(process) from stop
    code, stderr = _ended(process)
    if code != 0:
        raise TransferError(f"on the instance: {stderr.strip() or f'exit status {code}'}")
    return got
