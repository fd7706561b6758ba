"""Migrations that are safe to run while the previous release still serves (issue 31, Upgrades).

The chart migrates in a pre-upgrade hook, then rolls the pods: for a while the previous release's
code runs on the new schema. A migration must therefore never take away what that code reads or
writes, nor lock a large table for the length of a rewrite. `check_migrations` (run by
`make test`) walks every project migration in graph order and refuses:

- breaking: a column or table dropped (RemoveField, DeleteModel) or renamed (RenameField,
  RenameModel, AlterModelTable, a changed db_column) while the previous release's models still
  have it; a column made NOT NULL (AlterField) or added NOT NULL (AddField) without a database
  default, which the previous release's inserts leave out or set NULL; a state-only removal
  (SeparateDatabaseAndState) of a NOT NULL column without a database default, which the new
  code's inserts would leave out;
- blocking: on a listed large table (BIG_TABLES), a rewrite or a long ACCESS EXCLUSIVE lock: a
  column's type changed, SET NOT NULL, a volatile database default added, an index or a
  constraint built without CONCURRENTLY; raw SQL that drops or renames.

The previous release is the set of migrations in deploy/released-migrations.txt (written by
`check_migrations --release` when a release is cut). A removal is allowed in a migration that is
not in that set when the released models no longer have what it removes: the two-step way,
first a state-only removal (the code stops reading it, the column stays), a release, then the
database drop. Migrations that shipped before this check and break a rule are named in
ALLOWED with the reason they were accepted.
"""

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import connection, models
from django.db.migrations import operations as ops
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.migration import Migration
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState

from starverse.core import migration_allowlist

RELEASED_FILE = Path(settings.BASE_DIR) / "deploy" / "released-migrations.txt"

# Tables that grow with use (a row per posting, event, sample or log chunk): a rewrite or a
# blocking index build on one of them stops the platform for minutes. Lower-case model labels.
BIG_TABLES = {
    "accounts.auditevent": "the audit log: a row per audited act",
    "billing.ledgertransaction": "the ledger: a transaction per money movement",
    "billing.ledgerentry": "the ledger: two or more postings per transaction",
    "billing.stripeevent": "every webhook Stripe delivered",
    "compute.allocation": "usage: a row per GPU a holding took",
    "endpoints.endpointsample": "the endpoints' traffic samples, one a minute each",
    "fleet.gpusample": "GPU telemetry: a sample per GPU per report",
    "fleet.gpurollup": "GPU telemetry rolled up per minute",
    "fleet.nodeevent": "the nodes' events",
    "instances.instanceevent": "the instances' timelines",
    "instances.workloadlog": "the kept logs of programs",
    "jobs.jobevent": "the jobs' timelines",
}

# Functions PostgreSQL marks VOLATILE: a column added with one of these as its default is
# written into every existing row (a table rewrite). now() and constants are not.
VOLATILE_SQL = {"random", "gen_random_uuid", "uuid_generate_v4", "clock_timestamp", "nextval"}
RAW_SQL_DESTRUCTIVE = re.compile(
    r"\b(drop\s+(table|column)|rename\s+(to|column)|alter\s+column\s+\S+\s+type)\b", re.I
)

# Migrations that shipped before this check and break one of its rules, each with the reason it
# was accepted: key (app, migration name, rule).
ALLOWED = migration_allowlist.ALLOWED


@dataclass(frozen=True)
class Finding:
    """One refused operation: where it is, which rule it breaks and what to do instead."""

    app: str
    migration: str
    rule: str
    operation: str
    why: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.app, self.migration, self.rule)

    def __str__(self) -> str:
        return f"{self.app}.{self.migration}: {self.operation}: {self.rule}: {self.why}"


def project_apps() -> set[str]:
    """The apps whose migrations this repository writes (not Django's or third parties')."""
    from django.apps import apps

    base = Path(settings.BASE_DIR).resolve()
    return {
        config.label
        for config in apps.get_app_configs()
        if Path(config.path).resolve().is_relative_to(base)
        and not Path(config.path).resolve().is_relative_to(base / ".venv")
    }


def released_nodes(path: Path = RELEASED_FILE) -> set[tuple[str, str]]:
    """The migrations of the previous release, as listed in `path` (`app name` a line)."""
    if not path.exists():
        return set()
    nodes = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            app, name = line.split()
            nodes.add((app, name))
    return nodes


def write_released(loader: MigrationLoader, path: Path = RELEASED_FILE) -> int:
    """Record every migration of the project apps as released (when a release is cut)."""
    apps = project_apps()
    nodes = sorted(node for node in loader.graph.nodes if node[0] in apps)
    header = (
        "# The migrations of the latest release, one `app name` a line: check_migrations\n"
        "# judges a newer migration against these models (starverse/core/migration_safety.py).\n"
        "# Written by `manage.py check_migrations --release` when a release is cut.\n"
    )
    path.write_text(header + "".join(f"{app} {name}\n" for app, name in nodes))
    return len(nodes)


def released_state(loader: MigrationLoader, released: set[tuple[str, str]]) -> ProjectState:
    """The models as the previous release has them (its leaf migrations applied)."""
    nodes = [node for node in released if node in loader.graph.nodes]
    if not nodes:
        return ProjectState()
    return loader.project_state(nodes, at_end=True)


def plan(loader: MigrationLoader) -> list[Migration]:
    """Every migration in the order `migrate` applies them to an empty database."""
    seen: set[tuple[str, str]] = set()
    ordered = []
    for leaf in sorted(loader.graph.leaf_nodes()):
        for node in loader.graph.forwards_plan(leaf):
            if node not in seen:
                seen.add(node)
                ordered.append(loader.graph.nodes[node])
    return ordered


def check(
    loader: MigrationLoader,
    released: set[tuple[str, str]],
    allowed: dict[tuple[str, str, str], str] | None = None,
) -> list[Finding]:
    """Every finding in the project's migrations that ALLOWED (or `allowed`) does not accept."""
    allowed = ALLOWED if allowed is None else allowed
    previous = released_state(loader, released)
    apps = project_apps()
    state = ProjectState(real_apps=loader.unmigrated_apps)
    found = []
    for migration in plan(loader):
        if migration.app_label in apps:
            is_new = (migration.app_label, migration.name) not in released
            for finding in _migration(migration, state, previous if is_new else None):
                if finding.key not in allowed:
                    found.append(finding)
        for operation in migration.operations:
            operation.state_forwards(migration.app_label, state)
    return found


def _migration(
    migration: Migration, state: ProjectState, previous: ProjectState | None
) -> Iterator[Finding]:
    """The findings of one migration, `state` being the models just before it."""
    app = migration.app_label
    # state advances operation by operation on a copy, so that a later operation is judged
    # against the models its own migration left
    here = state.clone()
    created: set[str] = set()  # tables made by this migration: nothing reads them yet
    for operation in migration.operations:
        if isinstance(operation, ops.CreateModel):
            created.add(operation.name_lower)
        elif _model_of(operation) not in created:
            yield from _Judge(app, migration, here, previous).operation(operation)
        operation.state_forwards(app, here)


def _model_of(operation: Operation) -> str | None:
    """The lower-case name of the model an operation changes, if it changes one."""
    model = getattr(operation, "model_name", None) or getattr(operation, "name", None)
    return model.lower() if isinstance(model, str) else None


class _Judge:
    """Applies the rules to one operation against the models before it."""

    def __init__(
        self, app: str, migration: Migration, state: ProjectState, previous: ProjectState | None
    ) -> None:
        self.app = app
        self.migration = migration
        self.state = state
        self.previous = previous

    def finding(self, rule: str, operation: Operation, why: str) -> Finding:
        return Finding(self.app, self.migration.name, rule, operation.describe(), why)

    def operation(self, operation: Operation) -> Iterator[Finding]:
        if isinstance(operation, ops.SeparateDatabaseAndState):
            for inner in operation.database_operations:
                yield from self.operation(inner)
            yield from self.state_only_removals(operation)
            return
        yield from self.breaking(operation)
        yield from self.blocking(operation)

    # -- breaking the previous release ---------------------------------------------------------

    def previous_has_field(self, model: str, name: str) -> bool:
        """Whether the previous release's models have the field (unknown release: yes)."""
        if self.previous is None:
            return True
        state = self.previous.models.get((self.app, model.lower()))
        return state is not None and name.lower() in {f.lower() for f in state.fields}

    def previous_has_model(self, model: str) -> bool:
        if self.previous is None:
            return True
        return (self.app, model.lower()) in self.previous.models

    def field(self, model: str, name: str) -> models.Field[Any, Any] | None:
        state = self.state.models.get((self.app, model.lower()))
        return state.fields.get(name) if state is not None else None

    def breaking(self, operation: Operation) -> Iterator[Finding]:
        if isinstance(operation, ops.RemoveField):
            if self.previous_has_field(operation.model_name, operation.name):
                yield self.finding(
                    "drops a column the previous release reads",
                    operation,
                    "remove the field from the model in a state-only migration "
                    "(SeparateDatabaseAndState), release, then drop the column",
                )
        elif isinstance(operation, ops.DeleteModel):
            if self.previous_has_model(operation.name):
                yield self.finding(
                    "drops a table the previous release reads",
                    operation,
                    "delete the model in a state-only migration, release, then drop the table",
                )
        elif isinstance(operation, ops.RenameField):
            yield from self.renamed_field(operation)
        elif isinstance(operation, (ops.RenameModel, ops.AlterModelTable)):
            model = operation.old_name if isinstance(operation, ops.RenameModel) else operation.name
            if self.previous_has_model(model) and self.renames_table(operation):
                yield self.finding(
                    "renames a table the previous release reads",
                    operation,
                    "keep the table's name (Meta.db_table) and rename the model only",
                )
        elif isinstance(operation, ops.AddField):
            yield from self.added_not_null(operation)
        elif isinstance(operation, ops.AlterField):
            yield from self.altered(operation)

    def renames_table(self, operation: Operation) -> bool:
        before = ProjectState.clone(self.state)
        after = before.clone()
        operation.state_forwards(self.app, after)
        tables = [
            {m.options.get("db_table") or f"{a}_{n}" for (a, n), m in s.models.items()}
            for s in (before, after)
        ]
        return tables[0] != tables[1]

    def renamed_field(self, operation: ops.RenameField) -> Iterator[Finding]:
        old = self.field(operation.model_name, operation.old_name)
        after = self.state.clone()
        operation.state_forwards(self.app, after)
        new = after.models[self.app, operation.model_name_lower].fields.get(operation.new_name)
        if old is None or new is None:
            return
        moved = _column(operation.old_name, old) != _column(operation.new_name, new)
        if moved and self.previous_has_field(operation.model_name, operation.old_name):
            yield self.finding(
                "renames a column the previous release reads",
                operation,
                "add the new column, write both, backfill, switch reads, then drop the old one "
                "a release later (or keep the column with db_column)",
            )

    def added_not_null(self, operation: ops.AddField) -> Iterator[Finding]:
        field = operation.field
        if not self.previous_has_model(operation.model_name):
            return
        if _not_null_without_db_default(field):
            yield self.finding(
                "adds a NOT NULL column without a database default",
                operation,
                "the previous release's inserts leave it out: give it db_default= (or null=True)",
            )

    def altered(self, operation: ops.AlterField) -> Iterator[Finding]:
        old = self.field(operation.model_name, operation.name)
        new = operation.field
        if old is None:
            return
        moved = _column(operation.name, old) != _column(operation.name, new)
        if moved and self.previous_has_field(operation.model_name, operation.name):
            yield self.finding(
                "renames a column the previous release reads",
                operation,
                "keep db_column as it was; move data in two releases",
            )
        if old.null and not new.null and not _has_db_default(new):
            yield self.finding(
                "makes a column NOT NULL without a database default",
                operation,
                "the previous release may write NULL: backfill and add db_default= first, "
                "then make it NOT NULL a release after the code stops writing NULL",
            )

    def state_only_removals(self, operation: ops.SeparateDatabaseAndState) -> Iterator[Finding]:
        dropped = {
            (o.model_name_lower, o.name_lower)
            for o in operation.database_operations
            if isinstance(o, ops.RemoveField)
        }
        for inner in operation.state_operations:
            if not isinstance(inner, ops.RemoveField):
                continue
            if (inner.model_name_lower, inner.name_lower) in dropped:
                continue
            field = self.field(inner.model_name, inner.name)
            if field is not None and _not_null_without_db_default(field):
                yield self.finding(
                    "keeps a NOT NULL column the new code no longer writes",
                    inner,
                    "make the column nullable or give it db_default= in the same migration",
                )

    # -- blocking rewrites on big tables -------------------------------------------------------

    def big(self, model: str) -> str | None:
        return BIG_TABLES.get(f"{self.app}.{model.lower()}")

    def blocking(self, operation: Operation) -> Iterator[Finding]:
        if isinstance(operation, ops.RunSQL):
            sql = " ".join(_sql_text(operation.sql))
            if RAW_SQL_DESTRUCTIVE.search(sql):
                yield self.finding(
                    "raw SQL that drops, renames or retypes",
                    operation,
                    "express it as operations this check can judge, or allow-list it with why",
                )
            return
        model = _model_of(operation)
        if model is None or (table := self.big(model)) is None:
            return
        for why in self.rewrites(operation):
            yield self.finding("blocks a large table", operation, f"{table}: {why}")

    def rewrites(self, operation: Operation) -> Iterator[str]:
        if isinstance(operation, (AddIndexConcurrently, RemoveIndexConcurrently)):
            return
        if isinstance(operation, (ops.AddIndex, ops.AlterIndexTogether)):
            yield "an index built without CONCURRENTLY: use AddIndexConcurrently (atomic = False)"
        elif isinstance(operation, (ops.AddConstraint, ops.AlterUniqueTogether)):
            yield (
                "a constraint checked under an exclusive lock: add the unique index "
                "concurrently first, or a CHECK as NOT VALID then VALIDATE"
            )
        elif isinstance(operation, ops.AddField):
            field = operation.field
            if _indexed(field) or (field.is_relation and getattr(field, "db_constraint", False)):
                yield "an index or a foreign key built with the column: add them concurrently"
            if _volatile(getattr(field, "db_default", models.NOT_PROVIDED)):
                yield "a volatile database default writes every row: backfill in batches"
        elif isinstance(operation, ops.AlterField):
            old = self.field(operation.model_name, operation.name)
            new = operation.field
            if old is None:
                return
            if (was := _db_type(old)) != (now := _db_type(new)):
                yield f"the column's type changes ({was} → {now}): add a new column, backfill"

            if old.null and not new.null:
                yield "SET NOT NULL scans the table under an exclusive lock"
            if (_indexed(new) and not _indexed(old)) or (new.unique and not old.unique):
                yield "an index built without CONCURRENTLY: use AddIndexConcurrently"


def _column(name: str, field: models.Field[Any, Any]) -> str:
    if field.db_column:
        return str(field.db_column)
    return f"{name}_id" if field.many_to_one or field.one_to_one else name


def _db_type(field: models.Field[Any, Any]) -> str:
    """The column's SQL type; a foreign key's by the model it points at (state models are not
    resolved, and its type is its target's key's)."""
    if field.is_relation:
        # the label it points at, as the migration writes it ("app.model")
        return f"key of {str(field.deconstruct()[3].get('to', '')).lower()}"
    return str(field.db_type(connection))


def _indexed(field: models.Field[Any, Any]) -> bool:
    return bool(getattr(field, "db_index", False) or field.unique)


def _has_db_default(field: models.Field[Any, Any]) -> bool:
    return getattr(field, "db_default", models.NOT_PROVIDED) is not models.NOT_PROVIDED


def _not_null_without_db_default(field: models.Field[Any, Any]) -> bool:
    return not field.null and not _has_db_default(field) and not field.many_to_many


def _volatile(default: Any) -> bool:
    """Whether a db_default calls a function PostgreSQL evaluates once per row."""
    if default is models.NOT_PROVIDED or not hasattr(default, "get_source_expressions"):
        return False
    function = str(getattr(default, "function", "") or "").lower()
    if function in VOLATILE_SQL or type(default).__name__ == "RandomUUID":
        return True
    return any(_volatile(inner) for inner in default.get_source_expressions())


def _sql_text(sql: Any) -> Iterable[str]:
    if isinstance(sql, str):
        yield sql
    elif isinstance(sql, (list, tuple)):
        for item in sql:
            yield from _sql_text(item[0] if isinstance(item, (list, tuple)) else item)
