"""The migration check of `make test` (starverse.core.migration_safety, `manage.py
check_migrations`): fed migrations that would break the release still serving during a rolling
upgrade, or block a large table, it refuses each; their safe forms pass; the repository's own
migrations pass, and every allow-listed one is still needed."""

from collections.abc import Sequence

import pytest
from django.contrib.postgres.functions import RandomUUID
from django.contrib.postgres.operations import AddIndexConcurrently
from django.core.management import call_command
from django.db import migrations, models
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations.base import Operation

from starverse.core import migration_safety

RELEASED = migration_safety.released_nodes()


def _loader() -> MigrationLoader:
    return MigrationLoader(None, ignore_no_migrations=True)


def _add(loader: MigrationLoader, app: str, name: str, operations: Sequence[Operation]) -> None:
    """A migration `name` of `app` after the app's leaf, as a new file would be."""
    (leaf,) = [node for node in loader.graph.leaf_nodes() if node[0] == app]
    migration = type("Migration", (migrations.Migration,), {"operations": list(operations)})(
        name, app
    )
    migration.dependencies = [leaf]
    loader.graph.add_node((app, name), migration)
    loader.graph.add_dependency(migration, (app, name), leaf)


def _rules(
    operations: Sequence[Operation], app: str = "billing", released: set | None = None
) -> list[str]:
    loader = _loader()
    _add(loader, app, "0099_under_test", operations)
    findings = migration_safety.check(loader, RELEASED if released is None else released)
    assert all(f.migration == "0099_under_test" for f in findings), findings
    return [f.rule for f in findings]


def test_the_repositorys_migrations_pass_and_the_command_says_so(capsys):
    call_command("check_migrations")
    out = capsys.readouterr().out
    assert f"OK: migrations safe for a rolling upgrade ({len(RELEASED)} released" in out
    assert len(RELEASED) >= 88  # the release file is read: every migration of release 0.1.0


def test_every_allow_listed_migration_still_breaks_a_rule():
    """The allow-list names what the check finds without it, and nothing more."""
    found = {f.key for f in migration_safety.check(_loader(), RELEASED, allowed={})}
    assert set(migration_safety.ALLOWED) == found
    assert all(reason.strip() for reason in migration_safety.ALLOWED.values())


def test_a_column_dropped_that_the_previous_release_reads_is_refused():
    rules = _rules([migrations.RemoveField("invoiceprofile", "phone")])
    assert rules == ["drops a column the previous release reads"]


def test_a_table_dropped_or_renamed_is_refused():
    assert _rules([migrations.DeleteModel("runwaynotice")]) == [
        "drops a table the previous release reads"
    ]
    assert _rules([migrations.AlterModelTable("runwaynotice", "billing_notices")]) == [
        "renames a table the previous release reads"
    ]


def test_a_column_renamed_is_refused_unless_it_keeps_its_column():
    assert _rules([migrations.RenameField("invoiceprofile", "phone", "telephone")]) == [
        "renames a column the previous release reads"
    ]
    keeps = migrations.AlterField(
        "invoiceprofile", "phone", models.CharField(max_length=40, blank=True, db_column="phone")
    )
    assert _rules([keeps, migrations.RenameField("invoiceprofile", "phone", "telephone")]) == []


def test_a_column_made_not_null_without_a_database_default_is_refused():
    nullable = migrations.AlterField(
        "invoiceprofile", "phone", models.CharField(max_length=40, blank=True, null=True)
    )
    not_null = migrations.AlterField(
        "invoiceprofile", "phone", models.CharField(max_length=40, blank=True)
    )
    assert _rules([nullable]) == []
    assert _rules([nullable, not_null]) == ["makes a column NOT NULL without a database default"]
    with_default = migrations.AlterField(
        "invoiceprofile", "phone", models.CharField(max_length=40, blank=True, db_default="")
    )
    assert _rules([nullable, with_default]) == []


def test_a_not_null_column_added_needs_a_database_default():
    plain = models.CharField(max_length=8, default="x")
    assert _rules([migrations.AddField("invoiceprofile", "note", plain)]) == [
        "adds a NOT NULL column without a database default"
    ]
    for safe in (
        models.CharField(max_length=8, db_default="x"),
        models.CharField(max_length=8, null=True),
    ):
        assert _rules([migrations.AddField("invoiceprofile", "note", safe)]) == []
    # a table the same migration makes: nothing reads it yet
    made = migrations.CreateModel("Fresh", [("id", models.BigAutoField(primary_key=True))])
    assert _rules([made, migrations.AddField("fresh", "note", plain)]) == []


def test_a_removal_in_two_releases_passes_and_in_one_is_refused():
    """Release N removes the field from the models only (the column stays, nullable); release
    N+1 drops the column, which the previous release no longer reads."""
    nullable = migrations.AlterField(
        "invoiceprofile", "phone", models.CharField(max_length=40, blank=True, null=True)
    )
    stop_reading = migrations.SeparateDatabaseAndState(
        state_operations=[migrations.RemoveField("invoiceprofile", "phone")]
    )
    assert _rules([nullable, stop_reading]) == []

    loader = _loader()
    _add(loader, "billing", "0099_stop_reading_phone", [nullable, stop_reading])
    # the drop is a database-only operation: the models no longer have the field
    drop = migrations.SeparateDatabaseAndState(
        database_operations=[migrations.RemoveField("invoiceprofile", "phone")]
    )
    _add(loader, "billing", "0100_drop_phone", [drop])
    same_release = migration_safety.check(loader, RELEASED)
    assert [(f.migration, f.rule) for f in same_release] == [
        ("0100_drop_phone", "drops a column the previous release reads")
    ]
    next_release = RELEASED | {("billing", "0099_stop_reading_phone")}
    assert migration_safety.check(loader, next_release) == []


def test_keeping_a_not_null_column_the_code_no_longer_writes_is_refused():
    stop_reading = migrations.SeparateDatabaseAndState(
        state_operations=[migrations.RemoveField("invoiceprofile", "title")]
    )
    assert _rules([stop_reading]) == ["keeps a NOT NULL column the new code no longer writes"]


@pytest.mark.parametrize(
    "operation",
    [
        migrations.AddIndex(
            "ledgerentry", models.Index(fields=["amount_fen"], name="ledger_entry_amount")
        ),
        migrations.AddConstraint(
            "ledgerentry",
            models.CheckConstraint(condition=models.Q(amount_fen__gt=-(10**12)), name="sane"),
        ),
        migrations.AlterField("ledgerentry", "amount_fen", models.DecimalField(max_digits=20)),
        migrations.AlterField("ledgerentry", "account", models.CharField(max_length=64)),
        migrations.AddField("ledgerentry", "uid", models.UUIDField(db_default=RandomUUID())),
        migrations.AddField(
            "ledgerentry", "note", models.CharField(max_length=8, null=True, db_index=True)
        ),
        migrations.RunSQL("ALTER TABLE billing_invoiceprofile DROP COLUMN phone"),
    ],
    ids=["index", "constraint", "type", "length", "volatile-default", "indexed-column", "raw-sql"],
)
def test_a_blocking_change_to_a_large_table_is_refused(operation):
    rules = [r for r in _rules([operation]) if "NOT NULL" not in r]
    expected = "raw SQL that drops, renames or retypes"
    assert rules == [
        expected if isinstance(operation, migrations.RunSQL) else "blocks a large table"
    ]


def test_the_same_changes_done_safely_or_on_a_small_table_pass():
    index = models.Index(fields=["amount_fen"], name="ledger_entry_amount")
    assert _rules([AddIndexConcurrently("ledgerentry", index)]) == []
    assert (
        _rules([migrations.AddField("ledgerentry", "n", models.IntegerField(db_default=0))]) == []
    )
    small = models.Index(fields=["email"], name="invoice_profile_email")
    assert _rules([migrations.AddIndex("invoiceprofile", small)]) == []
    assert _rules([migrations.RunSQL("SELECT 1")]) == []


def test_without_a_previous_release_nothing_can_break_but_locks_still_count():
    assert _rules([migrations.RemoveField("invoiceprofile", "phone")], released=set()) == []
    index = models.Index(fields=["amount_fen"], name="ledger_entry_amount")
    assert _rules([migrations.AddIndex("ledgerentry", index)], released=set()) == [
        "blocks a large table"
    ]
