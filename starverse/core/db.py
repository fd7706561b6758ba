"""Database helpers for the few hot paths that the ORM makes slow."""

from datetime import UTC
from typing import Any

from django.db import connection
from django.db.models import Field, Model
from django.utils import timezone
from django.utils.dateparse import parse_datetime

BATCH = 2000


def bulk_set(model: type[Model], rows: list[tuple[Any, ...]], fields: list[str]) -> None:
    """Set `fields` on many rows at once; each row is (pk, *values). On PostgreSQL one
    UPDATE … FROM (VALUES …) per batch; elsewhere Django's bulk_update, which is correct but
    builds a CASE per field and row."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        objects = []
        for pk, *values in rows:
            obj = model(pk=pk)
            for field, value in zip(fields, values, strict=True):
                setattr(obj, field, value)
            objects.append(obj)
        model._default_manager.bulk_update(objects, fields, batch_size=500)
        return
    table, pk = model._meta.db_table, _column(model, model._meta.pk.name)
    columns = [_column(model, name) for name in fields]
    assignments = ", ".join(f'"{c}" = v."{c}"' for c in columns)
    names = ", ".join(f'"{c}"' for c in [pk, *columns])
    placeholder = "(" + ", ".join(["%s"] * (len(fields) + 1)) + ")"
    with connection.cursor() as cursor:
        for start in range(0, len(rows), BATCH):
            batch = rows[start : start + BATCH]
            cursor.execute(
                f'UPDATE "{table}" AS t SET {assignments} FROM (VALUES '  # noqa: S608
                f"{', '.join([placeholder] * len(batch))}) AS v({names}) "
                f'WHERE t."{pk}" = v."{pk}"',
                [value for row in batch for value in row],
            )


def _column(model: type[Model], name: str) -> str:
    field = model._meta.get_field(name)
    if not isinstance(field, Field) or field.column is None:
        raise TypeError(f"{model.__name__}.{name} has no column of its own")
    return field.column


def raw_datetime(value: Any) -> Any:
    """A datetime column read by raw SQL, as the ORM would give it: aware, in UTC. Drivers
    differ (SQLite gives text, PostgreSQL aware datetimes)."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value
