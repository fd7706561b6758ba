"""Database helpers for the few hot paths that the ORM makes slow."""

import functools
import hashlib
import io
import logging
import re
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import Field, Model, QuerySet
from django.db.models.expressions import DatabaseDefault

BATCH = 20_000
T = TypeVar("T")
M = TypeVar("M", bound=Model)
logger = logging.getLogger(__name__)


def bulk_set(
    model: type[Model], rows: list[tuple[Any, ...]], fields: list[str], *, add: bool = False
) -> None:
    """Set `fields` on many rows at once; each row is (pk, *values); with `add`, add the
    values to the fields instead (counters: no read, no lost update). One UPDATE … FROM
    unnest(one array per column) per batch: the statement stays the same size whatever the
    batch, and the server parses one array rather than a tuple per row (Django's bulk_update
    builds a CASE per field and row)."""
    if not rows:
        return
    table, pk = model._meta.db_table, _column(model, model._meta.pk.name)
    names = [pk, *(_column(model, name) for name in fields)]
    types = [_array_type(model, name) for name in [model._meta.pk.name, *fields]]
    plus = [f't."{c}" + ' if add else "" for c in names[1:]]
    assignments = ", ".join(f'"{c}" = {p}v."{c}"' for c, p in zip(names[1:], plus, strict=True))
    arrays = ", ".join(f"%s::{t}[]" for t in types)
    columns = ", ".join(f'"{c}"' for c in names)
    with connection.cursor() as cursor:
        for start in range(0, len(rows), BATCH):
            batch = rows[start : start + BATCH]
            cursor.execute(
                f'UPDATE "{table}" AS t SET {assignments} FROM unnest({arrays}) '  # noqa: S608
                f'AS v({columns}) WHERE t."{pk}" = v."{pk}"',
                [list(column) for column in zip(*batch, strict=True)],
            )


def _array_type(model: type[Model], name: str) -> str:
    """The column's type as an array element: varchar(32) → varchar, bigint stays."""
    field = model._meta.get_field(name)
    if not isinstance(field, Field):
        raise TypeError(f"{model.__name__}.{name} has no column of its own")
    db_type = field.cast_db_type(connection) or "text"
    return db_type.split("(")[0]


def bulk_insert(table: str, columns: list[str], rows: Sequence[Sequence[Any]]) -> None:
    """Insert many rows of plain values by one COPY (the metering tick writes 100,000
    transactions and twice as many entries a tick, and COPY takes them several times faster
    than INSERTs). Values are str, int, datetime or None."""
    if not rows:
        return
    with connection.cursor() as cursor:
        data = io.StringIO()
        for row in rows:
            data.write("\t".join(_copy_text(value) for value in row))
            data.write("\n")
        data.seek(0)
        cursor.copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN", data)


def _copy_text(value: Any) -> str:
    """A value in COPY's text format: \\N for null, backslash, tab and newlines escaped."""
    if value is None:
        return "\\N"
    if isinstance(value, str):
        if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
            return (
                value.replace("\\", "\\\\")
                .replace("\t", "\\t")
                .replace("\n", "\\n")
                .replace("\r", "\\r")
            )
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _column(model: type[Model], name: str) -> str:
    field = model._meta.get_field(name)
    if not isinstance(field, Field) or field.column is None:
        raise TypeError(f"{model.__name__}.{name} has no column of its own")
    return field.column


DEADLOCK_DETECTED = "40P01"


def is_deadlock(error: BaseException) -> bool:
    """Whether PostgreSQL broke a deadlock by aborting this transaction (its detector picks
    one of the two after deadlock_timeout); the transaction can simply be run again."""
    cause = error.__cause__
    return isinstance(error, OperationalError) and getattr(cause, "pgcode", None) == (
        DEADLOCK_DETECTED
    )


def atomic_retrying(function: Callable[[], T], *, attempts: int = 3) -> T:
    """Run `function` in its own transaction, again (from the start) when PostgreSQL aborted
    it to break a deadlock: the standard answer to a detected deadlock, for the few
    transactions whose lock order depends on what they find (a concurrent order claiming
    nodes, compute.placement.choose). Inside another transaction it runs once, in a
    savepoint: rolling back to a savepoint would not release the locks the deadlock is over."""
    if connection.in_atomic_block:
        with transaction.atomic():
            return function()
    for attempt in range(attempts):
        try:
            with transaction.atomic():
                return function()
        except OperationalError as error:
            if not is_deadlock(error) or attempt == attempts - 1:
                raise
            logger.info("db.deadlock_retried attempt=%d", attempt + 1)
    raise AssertionError("unreachable")


def insert_together(objects: list[Model]) -> None:
    """Insert new model instances, of one or several models (a parent before the rows that
    refer to it), as one statement: a chain of data-modifying WITH clauses, so that an
    order's instance, its timeline and its GPUs cost one round trip. Values are prepared as
    save() prepares them (defaults, auto_now); a row whose primary key the database assigns
    leaves it unset here, as nobody reads it back. Foreign keys are checked at commit (Django's
    constraints are deferred), so the order within the statement does not matter to them."""
    if not objects:
        return
    parts, params = [], []
    for n, obj in enumerate(objects):
        fields = [
            f
            for f in obj._meta.concrete_fields
            if not (f.primary_key and getattr(obj, f.attname) is None)
        ]
        raw = [f.pre_save(obj, True) for f in fields]
        columns = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
        # a field with only a database default (db_default) left unset: the column's DEFAULT
        marks = ", ".join(
            "DEFAULT" if isinstance(value, DatabaseDefault) else "%s" for value in raw
        )
        table = connection.ops.quote_name(obj._meta.db_table)
        parts.append((f"i{n}", f"INSERT INTO {table} ({columns}) VALUES ({marks})"))  # noqa: S608
        params += [
            f.get_db_prep_save(value, connection)
            for f, value in zip(fields, raw, strict=True)
            if not isinstance(value, DatabaseDefault)
        ]
    *first, (_name, last) = parts
    chain = ", ".join(f"{name} AS ({sql})" for name, sql in first)
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {chain} {last}" if chain else last, params)
    for obj in objects:
        obj._state.adding = False
        obj._state.db = connection.alias


def first_row(model: type[M], where: str, params: list[Any], *, lock: bool = False) -> M | None:
    """The first row of `model` matching a plain WHERE clause (of its own columns, by
    placeholders), loaded as the ORM loads it: for reads every request or order makes, where
    building the query through the ORM cost more than running it. With `lock`, FOR UPDATE
    (held to the end of the transaction)."""
    select, attnames, converters = _row_reader(model)
    suffix = " FOR UPDATE" if lock else ""
    with connection.cursor() as cursor:
        cursor.execute(f"{select} WHERE {where} LIMIT 1{suffix}", params)
        row = cursor.fetchone()
    if row is None:
        return None
    values = [convert(value) for convert, value in zip(converters, row, strict=True)]
    return model.from_db(connection.alias, attnames, values)


@functools.cache
def _row_reader(model: type[Model]) -> tuple[str, list[str], list[Callable[[Any], Any]]]:
    """For first_row, once a process: the SELECT of the model's columns, their attribute names,
    and how each column's raw value becomes the field's Python value (the backend's and the
    field's converters, as the ORM's compiler applies them)."""
    fields = list(model._meta.concrete_fields)
    columns = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
    select = f"SELECT {columns} FROM {connection.ops.quote_name(model._meta.db_table)}"  # noqa: S608
    converters: list[Callable[[Any], Any]] = []
    for field in fields:
        column = field.get_col(model._meta.db_table)
        steps = connection.ops.get_db_converters(column) + column.get_db_converters(connection)

        def convert(value: Any, steps: list[Any] = steps, column: Any = column) -> Any:
            for step in steps:
                value = step(value, column, connection)
            return value

        converters.append(convert)
    return select, [f.attname for f in fields], converters


# The statements each PostgreSQL session has prepared, by the driver's connection object.
_PREPARED: "weakref.WeakKeyDictionary[Any, set[str]]" = weakref.WeakKeyDictionary()
_NAMED = re.compile(r"%\((\w+)\)s")
# Each statement's text read once a process: (its session name, its parameters in order, the
# PREPARE's body); the list's reads run every request.
_PARSED: dict[tuple[str, str], tuple[str, list[str], str]] = {}


def execute_prepared(cursor: Any, name: str, sql: str, params: dict[str, Any]) -> None:
    """Run `sql` (named placeholders, %(name)s) as a server-side prepared statement: PostgreSQL
    plans it once a session instead of at every call. For the few statements of the hot paths
    whose planning costs as much as their running (placement's candidate query, the instance
    list's page). The session prepares it on first use, through the driver's own cursor: it is
    the connection's set-up, not one of the request's queries (a request's query count does not
    depend on what its connection did before); a new connection prepares it again. With
    DB_PREPARED_STATEMENTS off (behind any pooler in transaction mode: PgBouncer tracks only the
    protocol's prepared statements, never SQL PREPAREs), it is executed as written."""
    if not settings.DB_PREPARED_STATEMENTS:
        cursor.execute(sql, params)
        return
    parsed = _PARSED.get((name, sql))
    if parsed is None:
        order = list(dict.fromkeys(_NAMED.findall(sql)))
        # the text's digest in the name: a statement changed by a deploy is never confused
        digest = hashlib.sha1(sql.encode(), usedforsecurity=False).hexdigest()[:10]
        positional = _NAMED.sub(lambda match: f"${order.index(match.group(1)) + 1}", sql)
        parsed = _PARSED[(name, sql)] = (f"{name}_{digest}", order, positional)
    session_name, order, positional = parsed
    raw = connection.connection
    prepared = _PREPARED.setdefault(raw, set())
    if session_name not in prepared:
        with connection.wrap_database_errors, raw.cursor() as setup:
            setup.execute(f"PREPARE {session_name} AS {positional}")
        prepared.add(session_name)
    marks = ", ".join(["%s"] * len(order))
    cursor.execute(f"EXECUTE {session_name}({marks})", [params[key] for key in order])


@dataclass(frozen=True)
class CompiledQuery:
    """An ORM query's SQL, compiled once a process (compile_once), with the positions of the
    parameters that change from call to call."""

    sql: str
    params: tuple[Any, ...]
    slots: tuple[str | None, ...]  # each parameter's name, or None for a constant

    def rows(self, **values: Any) -> list[dict[str, Any]]:
        """The query run with these values of its named parameters: each row as a dict by
        column name, as the driver returns it (no ORM converters: the caller casts)."""
        params = [
            values[slot] if slot else constant
            for constant, slot in zip(self.params, self.slots, strict=True)
        ]
        with connection.cursor() as cursor:
            cursor.execute(self.sql, params)
            names = [column.name for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def compile_once(queryset: QuerySet[Any], sentinels: dict[str, Any]) -> CompiledQuery:
    """The queryset's SQL with each parameter equal to one of `sentinels` (values no real call
    passes, built into the queryset in place of the real ones) marked by its name, for the
    few read paths whose ORM query costs more to build than to run. Keep the result per process
    and per shape (functools.cache): building the SQL is then done once, not per request."""
    sql, params = queryset.query.sql_with_params()
    slots = tuple(
        next((name for name, value in sentinels.items() if _same(param, value)), None)
        for param in params
    )
    missing = set(sentinels) - set(slots)
    if missing:
        raise ValueError(f"the query has no parameter for {sorted(missing)}")
    return CompiledQuery(sql=sql, params=tuple(params), slots=slots)


def _same(param: Any, sentinel: Any) -> bool:
    return type(param) is type(sentinel) and param == sentinel
