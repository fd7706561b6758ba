"""Refuse TRUNCATE of the ledger tables too: row triggers (0002) do not fire on it, so one
statement could empty the ledger. The one exception is a transaction that has set
`starverse.ledger_truncate` to 'on': only the test suite's flush between transactional tests
does (tests/conftest.py)."""

from django.db import migrations

TABLES = ["billing_ledgertransaction", "billing_ledgerentry"]

POSTGRES_FUNCTION = """
CREATE OR REPLACE FUNCTION starverse_ledger_no_truncate() RETURNS trigger AS $$
BEGIN
    IF current_setting('starverse.ledger_truncate', true) IS DISTINCT FROM 'on' THEN
        RAISE EXCEPTION 'ledger rows are append-only: TRUNCATE on % refused', TG_TABLE_NAME
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""


def install(apps, schema_editor):
    schema_editor.execute(POSTGRES_FUNCTION, params=None)
    for table in TABLES:
        schema_editor.execute(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION starverse_ledger_no_truncate();"
        )


def uninstall(apps, schema_editor):
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};")
    schema_editor.execute("DROP FUNCTION IF EXISTS starverse_ledger_no_truncate();")


class Migration(migrations.Migration):
    dependencies = [("billing", "0003_payments")]
    operations = [migrations.RunPython(install, uninstall)]
