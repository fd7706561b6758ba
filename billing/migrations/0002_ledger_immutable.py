"""Make ledger rows append-only in the database itself: any UPDATE or DELETE of a transaction
or an entry raises, whoever issues it (ORM, admin, raw SQL)."""

from django.db import migrations

TABLES = ["billing_ledgertransaction", "billing_ledgerentry"]

POSTGRES_FUNCTION = """
CREATE OR REPLACE FUNCTION starverse_ledger_immutable() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'ledger rows are append-only: % on % refused (post a reversal instead)',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
"""


def install(apps, schema_editor):
    schema_editor.execute(POSTGRES_FUNCTION, params=None)
    for table in TABLES:
        schema_editor.execute(
            f"CREATE TRIGGER {table}_immutable BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION starverse_ledger_immutable();"
        )


def uninstall(apps, schema_editor):
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_immutable ON {table};")
    schema_editor.execute("DROP FUNCTION IF EXISTS starverse_ledger_immutable();")


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]
    operations = [migrations.RunPython(install, uninstall)]
