"""The database snapshot of `make run`'s first start: the schema and rows that every migration
leaves in an empty database, as SQL (devstack/schema.sql), loaded in a second where running the
~100 migrations takes ~15 s (Django renders every model state on the way; that was most of a
first `make run` after the install). Rails' `db:schema:load` and GitLab's structure.sql do the
same for a new development database.

Only an empty database gets it, and only a snapshot made from the migrations in this checkout:
its first line records a digest of every migration file, and a snapshot whose digest differs
(a migration added or edited since it was written) is not loaded — `migrate` then runs them all,
as before. `make schema` writes it again and a test fails while it is stale (tests/devstack/
test_schema_snapshot.py, which also compares the loaded schema with a migrated one, column by
column, index by index). Production, CI and the test databases always run the migrations.

    python -m devstack.schema load    # DATABASE_URL: load it if the database is empty
    python -m devstack.schema write   # DATABASE_URL's server: migrate a scratch database, dump it
    python -m devstack.schema check   # exit 1 when the snapshot is older than the migrations
"""

import argparse
import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg2

from devstack.postgres import bindir

REPO = Path(__file__).resolve().parents[1]
SNAPSHOT = REPO / "devstack" / "schema.sql"
DIGEST_LINE = "-- starverse migrations digest: "
# pg_dump's psql-only meta-commands (\restrict, since the August 2025 releases): a driver
# cannot run them, and they guard nothing in a file made here.
META_PREFIX = "\\"


def migration_files() -> list[Path]:
    """Every migration module of the project's apps (not those of installed packages)."""
    return sorted(
        path
        for path in REPO.glob("**/migrations/*.py")
        if ".venv" not in path.parts and "node_modules" not in path.parts
    )


def migrations_digest() -> str:
    """SHA-256 over every migration file's path and bytes: what the snapshot was made from."""
    digest = hashlib.sha256()
    for path in migration_files():
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def snapshot_digest(snapshot: Path = SNAPSHOT) -> str | None:
    """The digest a snapshot was made from; None when there is none."""
    if not snapshot.exists():
        return None
    with snapshot.open(encoding="utf-8") as lines:
        first = lines.readline().rstrip("\n")
    return first.removeprefix(DIGEST_LINE) if first.startswith(DIGEST_LINE) else None


def is_empty(database_url: str) -> bool:
    """No table in the database's public schema: a database no migration has touched."""
    with psycopg2.connect(database_url) as connection, connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = 'public')"
        )
        found = cursor.fetchone()
    connection.close()
    return not (found and found[0])


def load(database_url: str, snapshot: Path = SNAPSHOT) -> str:
    """Load the snapshot into an empty database, in one transaction; say what was done."""
    if snapshot_digest(snapshot) != migrations_digest():
        return "the schema snapshot is older than the migrations: they run from the first"
    if not is_empty(database_url):
        return "the database has its schema already"
    # a connection of its own: the dump empties the session's search_path
    connection = psycopg2.connect(database_url)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(snapshot.read_text(encoding="utf-8"))
    finally:
        connection.close()
    return "the schema loaded from devstack/schema.sql"


def _with_database(database_url: str, name: str) -> str:
    parts = urlsplit(database_url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def _admin(database_url: str, statement: str) -> None:
    connection = psycopg2.connect(_with_database(database_url, "postgres"))
    connection.autocommit = True
    try:
        connection.cursor().execute(statement)
    finally:
        connection.close()


def dump(database_url: str) -> str:
    """pg_dump of a database as SQL a driver can run: INSERTs, no owners, no meta-commands."""
    pg_dump = bindir() / "pg_dump"
    command = [str(pg_dump) if pg_dump.exists() else "pg_dump", "--no-owner", "--no-privileges"]
    text = subprocess.run(  # noqa: S603 - PostgreSQL's pg_dump, with our arguments
        [*command, "--inserts", "--dbname", database_url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return "".join(
        line for line in text.splitlines(keepends=True) if not line.startswith(META_PREFIX)
    )


def write(database_url: str, snapshot: Path = SNAPSHOT) -> None:
    """Migrate a scratch database on DATABASE_URL's server from nothing and keep its dump."""
    scratch = f"starverse_snapshot_{uuid.uuid4().hex[:8]}"
    _admin(database_url, f'CREATE DATABASE "{scratch}"')
    try:
        url = _with_database(database_url, scratch)
        environment = {
            **os.environ,
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "starverse.settings.dev",
        }
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
            check=True,
            cwd=REPO,
            env=environment,
        )
        snapshot.write_text(DIGEST_LINE + migrations_digest() + "\n" + dump(url), "utf-8")
    finally:
        _admin(database_url, f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.schema", description=__doc__)
    parser.add_argument("action", choices=["load", "write", "check"])
    action = parser.parse_args(argv).action
    if action == "check":
        current = snapshot_digest() == migrations_digest()
        if not current:
            print("devstack/schema.sql is older than the migrations: run `make schema`")
        return 0 if current else 1
    database_url = os.environ.get("DATABASE_URL")
    if not database_url:
        print("DATABASE_URL is not set", file=sys.stderr)
        return 2
    if action == "write":
        write(database_url)
        print(f"wrote {SNAPSHOT.relative_to(REPO)}")
    else:
        print(load(database_url))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
