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
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_FUNCTION, params=None)
        for table in TABLES:
            schema_editor.execute(
                f"CREATE TRIGGER {table}_immutable BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION starverse_ledger_immutable();"
            )
    elif vendor == "sqlite":
        for table in TABLES:
            for op in ("UPDATE", "DELETE"):
                schema_editor.execute(
                    f"CREATE TRIGGER {table}_no_{op.lower()} BEFORE {op} ON {table} BEGIN "
                    f"SELECT RAISE(ABORT, 'ledger rows are append-only: {op} on {table} refused'); END;"
                )
    else:
        raise RuntimeError(f"No ledger immutability triggers for database {vendor!r}")


def uninstall(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for table in TABLES:
        if vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_immutable ON {table};")
        else:
            for op in ("update", "delete"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_{op};")
    if vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS starverse_ledger_immutable();")


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]
    operations = [migrations.RunPython(install, uninstall)]
