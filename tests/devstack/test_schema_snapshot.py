"""The database snapshot of `make run`'s first start (devstack/schema.py): as new as the
migrations, and loading it gives the very schema migrating from nothing gives (the test
database, which pytest-django migrates), table by table, index by index, trigger by trigger;
only an empty database gets it, and a stale one is never loaded."""

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from django.db import connection

from devstack import schema

CATALOG = {
    "columns": "SELECT table_name, column_name, data_type, is_nullable, column_default, "
    "character_maximum_length, is_identity FROM information_schema.columns "
    "WHERE table_schema = 'public'",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'",
    "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
    "FROM pg_constraint WHERE connamespace = 'public'::regnamespace",
    "triggers": "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger "
    "WHERE NOT tgisinternal",
    "functions": "SELECT proname, prosrc FROM pg_proc WHERE pronamespace = 'public'::regnamespace",
    "migrations": "SELECT app, name FROM django_migrations",
}


def _url(name: str) -> str:
    settings = connection.settings_dict
    host, port = settings["HOST"] or "127.0.0.1", settings["PORT"] or 5432
    return f"postgresql://{settings['USER']}@{host}:{port}/{name}"


def _canonical(value: Any) -> Any:
    """An expression without its casts and parentheses: PostgreSQL prints a partial index's
    `status IN (...)` as a cast array when it is made, and casts each element once it has been
    dumped and read back: the same predicate."""
    if not isinstance(value, str):
        return value
    return re.sub(r"::[a-z ]+(\[\])?|[()\s]", "", value)


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql)
            rows = [tuple(_canonical(value) for value in row) for row in cursor.fetchall()]
            return sorted(rows, key=repr)
    finally:
        conn.close()


def _admin(sql: str) -> None:
    conn = psycopg2.connect(_url("postgres"))
    try:
        conn.autocommit = True
        conn.cursor().execute(sql)
    finally:
        conn.close()


@pytest.fixture
def scratch(db: None) -> Iterator[str]:
    """An empty database on the test server, dropped after."""
    name = f"{connection.settings_dict['NAME']}_snapshot"
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin(f'CREATE DATABASE "{name}"')
    try:
        yield _url(name)
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_snapshot_is_as_new_as_the_migrations() -> None:
    assert schema.snapshot_digest() == schema.migrations_digest(), (
        "devstack/schema.sql is older than the migrations: run `make schema` and commit it"
    )


def test_loading_it_gives_the_schema_migrating_gives(scratch: str) -> None:
    assert schema.load(scratch) == "the schema loaded from devstack/schema.sql"
    migrated = _url(connection.settings_dict["NAME"])
    for what, sql in CATALOG.items():
        loaded_rows, migrated_rows = _rows(scratch, sql), _rows(migrated, sql)
        assert loaded_rows, what
        assert loaded_rows == migrated_rows, f"the loaded {what} differ from the migrated ones"


def test_only_an_empty_database_gets_it(scratch: str) -> None:
    schema.load(scratch)
    before = _rows(scratch, "SELECT count(*) FROM django_migrations")
    assert schema.load(scratch) == "the database has its schema already"
    assert _rows(scratch, "SELECT count(*) FROM django_migrations") == before


def test_a_stale_snapshot_is_never_loaded(scratch: str, tmp_path: Path) -> None:
    stale = tmp_path / "schema.sql"
    body = schema.SNAPSHOT.read_text(encoding="utf-8").split("\n", 1)[1]
    stale.write_text(f"{schema.DIGEST_LINE}{'0' * 64}\n{body}", encoding="utf-8")
    assert schema.load(scratch, stale).startswith("the schema snapshot is older")
    assert schema.is_empty(scratch)
