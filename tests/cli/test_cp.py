"""`starverse cp` end to end: the CLI (in this process) asks the scripted API for the instance,
pins its host key and copies over the real OpenSSH sshd that the images' init runs (Debian's, in
a scratch root), through a TCP relay that counts the bytes each way and can cut the connection
mid-file, as a dropped network would. A cut copy run again sends only what is missing: the
relay's count is compared with a whole copy of the same file. Both transports: rsync (both ends
have it here) and plain ssh (`--no-rsync`, as where the instance has no rsync)."""

import contextlib
import hashlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from starverse.core.hostkeys import host_key_generate
from starverse_cli import transfer
from tests.cli.test_commands import INSTANCE, logged_in, run
from tests.sshd import InitRoot, user_key

SIZE = 24 * 1024 * 1024
CUT = 8 * 1024 * 1024
KEYS = {"count": 1, "next": None, "results": [{"id": "key_1", "name": "laptop"}]}


class Relay:
    """127.0.0.1:port → the sshd, counting the bytes sent up (client → instance) and down, and
    closing a connection once `cut_after` bytes have gone up through it."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.up = self.down = 0
        self.cut_after: int | None = None
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self) -> None:
        with self.lock:
            self.up = self.down = 0

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            sent = [0]
            for source, sink, upward in ((client, server, True), (server, client, False)):
                threading.Thread(
                    target=self._pump, args=(source, sink, upward, sent, (client, server))
                ).start()

    def _pump(self, source, sink, upward, sent, both) -> None:
        try:
            while data := source.recv(65536):
                with self.lock:
                    if upward:
                        sent[0] += len(data)
                        self.up += len(data)
                    else:
                        self.down += len(data)
                cut = upward and self.cut_after is not None and sent[0] > self.cut_after
                if cut:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for end in both:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def _ssh(**changes: object) -> dict[str, object]:
    """The instance's `ssh` block as the API gives it, with `changes`."""
    return {**cast(dict[str, object], INSTANCE["ssh"]), **changes}


@pytest.fixture
def instance(init_root: Path, cli_env: Path, fake_api, monkeypatch) -> Iterator[dict]:
    """A running instance as the API gives it, its sshd the images' init behind a Relay, and
    the user's key; the scratch root's data folder is where files go."""
    sshd = InitRoot(init_root, host_key_generate())
    key, public = user_key(init_root, "laptop")
    sshd.secret(public + "\n")
    sshd.boot()
    relay = Relay(sshd.port)
    logged_in(fake_api, monkeypatch)
    ssh = _ssh(port=relay.port, host_key_fingerprint=sshd.host_key.fingerprint)
    fake_api.on("GET", "/api/v1/instances/ins_abc", body=dict(INSTANCE, ssh=ssh))
    fake_api.on("GET", "/api/v1/ssh-keys", body=KEYS)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    try:
        yield {"relay": relay, "key": str(key), "data": init_root / "root" / "data"}
    finally:
        relay.close()
        sshd.kill()


def _settled_size(path: Path) -> int:
    """The size of what the instance's side kept once it has noticed the cut (its rsync or
    cat ends a moment after the client does)."""
    deadline = time.monotonic() + 15
    last = -1
    while True:
        size = path.stat().st_size if path.exists() else -1
        if size > 0 and size == last:
            return size
        assert time.monotonic() < deadline, f"nothing kept at {path}"
        last = size
        time.sleep(0.3)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cp(instance: dict, *args: str) -> tuple[int, str, str]:
    return run("cp", *args, "-i", instance["key"], "-o", "BatchMode=yes")


@pytest.mark.parametrize(
    ("flags", "partial_of"),
    [
        ((), lambda d: d / "in" / transfer.PARTIAL_DIR / "big.bin"),
        (("--no-rsync",), lambda d: d / "in" / ("big.bin" + transfer.PART_SUFFIX)),
    ],
    ids=["rsync", "ssh"],
)
def test_a_cut_upload_run_again_sends_only_the_rest(instance, tmp_path, flags, partial_of):
    relay, data = instance["relay"], instance["data"]
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(SIZE))
    remote = f"ins_abc:{data}/in/"

    # the whole file once, for the baseline
    code, _out, err = cp(instance, *flags, str(big), f"ins_abc:{data}/whole/")
    assert code == 0, err
    whole = relay.up
    assert _digest(data / "whole" / "big.bin") == _digest(big)

    # cut after CUT bytes: exit 7, the message says to run it again, no file under its name
    relay.reset()
    relay.cut_after = CUT
    code, _out, err = cp(instance, *flags, str(big), remote)
    assert code == 7, err
    assert "run the same command again" in err
    assert not (data / "in" / "big.bin").exists()
    kept = _settled_size(partial_of(data))
    assert 0 < kept < SIZE

    # again: only the rest goes up
    relay.cut_after = None
    relay.reset()
    code, _out, err = cp(instance, *flags, str(big), remote)
    assert code == 0, err
    resumed = relay.up
    assert _digest(data / "in" / "big.bin") == _digest(big)
    assert not partial_of(data).exists()
    print(f"\n{flags or 'rsync'}: whole {whole} B up; kept {kept} B; resumed {resumed} B up")
    assert whole > SIZE
    assert SIZE - kept <= resumed < SIZE - kept + SIZE // 50  # the rest, plus at most 2 %

    # a third run finds it all there: next to nothing goes up
    relay.reset()
    assert cp(instance, *flags, str(big), remote)[0] == 0
    assert relay.up < SIZE // 100


@pytest.mark.parametrize("flags", [(), ("--no-rsync",)], ids=["rsync", "ssh"])
def test_a_folder_goes_in_and_comes_back_out(instance, tmp_path, flags):
    data = instance["data"]
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "README").write_text("hello\n")
    (folder / "src" / "train.py").write_text("print('train')\n")
    (folder / "src" / "weights.bin").write_bytes(os.urandom(300_000))

    code, _out, err = cp(instance, *flags, str(folder), f"ins_abc:{data}")
    assert code == 0, err
    assert (data / "project" / "src" / "train.py").read_text() == "print('train')\n"

    # a trailing slash copies the folder's contents
    code, _out, err = cp(instance, *flags, f"{folder}/", f"ins_abc:{data}/flat")
    assert code == 0, err
    assert sorted(p.name for p in (data / "flat").iterdir()) == ["README", "src"]

    out_dir = tmp_path / "out"
    code, _out, err = cp(instance, *flags, f"ins_abc:{data}/project", str(out_dir))
    assert code == 0, err
    for name in ("README", "src/train.py", "src/weights.bin"):
        assert _digest(out_dir / "project" / name) == _digest(folder / name)

    # one file to a new name
    code, _out, err = cp(instance, *flags, f"ins_abc:{data}/project/README", str(tmp_path / "r"))
    assert code == 0, err
    assert (tmp_path / "r").read_text() == "hello\n"

    missing = cp(instance, *flags, f"ins_abc:{data}/nothing", str(out_dir))
    assert missing[0] == 1
    assert "no such file" in missing[2]


def test_a_download_cut_over_plain_ssh_resumes_from_what_arrived(instance, tmp_path):
    relay, data = instance["relay"], instance["data"]
    (data / "ckpt.pt").write_bytes(os.urandom(SIZE))
    local = tmp_path / "ckpt.pt"
    partial = tmp_path / ("ckpt.pt" + transfer.PART_SUFFIX)
    partial.write_bytes((data / "ckpt.pt").read_bytes()[:CUT])  # what a cut copy left

    relay.reset()
    code, _out, err = cp(instance, "--no-rsync", f"ins_abc:{data}/ckpt.pt", str(local))
    assert code == 0, err
    assert _digest(local) == _digest(data / "ckpt.pt")
    assert SIZE - CUT <= relay.down < SIZE - CUT + SIZE // 50
    assert f"resumed at byte {CUT}" in err

    # a part that is not the file's beginning is not trusted: the whole file comes again
    local.unlink()
    partial.write_bytes(b"\0" * CUT)
    relay.reset()
    assert cp(instance, "--no-rsync", f"ins_abc:{data}/ckpt.pt", str(local))[0] == 0
    assert _digest(local) == _digest(data / "ckpt.pt")
    assert relay.down > SIZE


def test_the_host_key_is_pinned_not_trusted(instance, tmp_path, fake_api):
    other = host_key_generate()
    ssh = _ssh(port=instance["relay"].port, host_key_fingerprint=other.fingerprint)
    fake_api.answers[("GET", "/api/v1/instances/ins_abc")] = [(200, dict(INSTANCE, ssh=ssh), {})]
    (tmp_path / "f").write_text("x")
    code, _out, err = cp(instance, str(tmp_path / "f"), f"ins_abc:{instance['data']}/f")
    assert code == 1
    assert "not the instance's" in err
    assert not (instance["data"] / "f").exists()


# ---------------------------------------------------------------- refusals, nothing sent


@pytest.mark.parametrize(
    ("text", "named", "path"),
    [
        ("ins_abc:/root/data", "ins_abc", "/root/data"),
        ("train-1:out", "train-1", "out"),
        ("./a:b", None, "./a:b"),
        ("/x/y:z", None, "/x/y:z"),
        ("data", None, "data"),
    ],
)
def test_an_instance_is_named_before_a_colon(text, named, path):
    assert transfer.location(text) == transfer.Location(named, path)


@pytest.mark.parametrize(
    ("path", "absolute"),
    [("", "/root/"), ("out/", "/root/out/"), ("/root/data/../x", "/root/x"), ("/", "/")],
)
def test_remote_paths_are_absolute_under_roots_home(path, absolute):
    assert transfer.remote_path(path) == absolute


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/root/data/x", None),
        ("/opt/tools", None),
        ("/mnt/ckpt/run1", None),
        ("/nas/shared", None),
        ("/public/data/x", "read-only"),
        ("/mnt/other", "no cloud disk of this instance is mounted at /mnt/other"),
        ("/srv/x", "is not kept on the instance"),
        ("/", "is not kept on the instance"),
    ],
)
def test_where_files_may_be_written(path, words):
    problem = transfer.destination_problem(path, ["/mnt/ckpt"], True)
    assert (problem is None) if words is None else (words in str(problem))


def test_a_stopped_instance_a_read_only_path_or_no_key_is_refused_clearly(
    cli_env, fake_api, monkeypatch, tmp_path
):
    logged_in(fake_api, monkeypatch)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    (tmp_path / "f").write_text("x")
    fake_api.on("GET", "/api/v1/instances/ins_abc", body=dict(INSTANCE, status="stopped", ssh=None))
    code, _out, err = run("cp", str(tmp_path / "f"), "ins_abc:/root/data/")
    assert code == 6
    assert "ins_abc is stopped: files can be copied while it runs" in err
    assert "starverse start ins_abc --wait" in err

    fake_api.answers.clear()
    fake_api.on("GET", "/api/v1/instances/ins_abc", body=INSTANCE)
    code, _out, err = run("cp", str(tmp_path / "f"), "ins_abc:/public/data/f")
    assert code == 2
    assert "/public/data/f is in the public pool, which is read-only" in err
    code, _out, err = run("cp", str(tmp_path / "f"), "ins_abc:/srv/f")
    assert code == 2 and "is not kept on the instance" in err
    fake_api.on("GET", "/api/v1/nas", 404, {"detail": "No NAS.", "code": "no_nas"})
    code, _out, err = run("cp", str(tmp_path / "f"), "ins_abc:/nas/f")
    assert code == 2 and "you have no shared NAS" in err

    # no key here (HOME has no ~/.ssh, no agent): said before ssh runs
    fake_api.on("GET", "/api/v1/ssh-keys", body=KEYS)
    code, _out, err = run("cp", str(tmp_path / "f"), "ins_abc:/root/data/")
    assert code == 2
    assert "no SSH key" in err and "ssh-keygen -t ed25519" in err

    # both sides local, or both on instances: usage
    assert run("cp", "a", "b")[0] == 2
    assert run("cp", "ins_abc:/a", "ins_def:/b")[0] == 2
    assert not any(sent.method != "GET" for sent in fake_api.sent)


def test_an_account_without_ssh_keys_is_told_to_add_one(instance, tmp_path, fake_api):
    fake_api.answers[("GET", "/api/v1/ssh-keys")] = [(200, {"count": 0, "results": []}, {})]
    (tmp_path / "f").write_text("x")
    code, _out, err = cp(instance, str(tmp_path / "f"), f"ins_abc:{instance['data']}/")
    assert code == 1
    assert "your account has no SSH key" in err and "starverse keys add" in err
