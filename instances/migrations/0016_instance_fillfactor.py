"""Leave room on each page of instances_instance (fillfactor 45).

The metering tick updates every running instance's billed minutes and cost each minute. Those
columns are in no index, so with room on the page PostgreSQL makes each update a heap-only
tuple (HOT) and touches none of the table's twenty indexes; on full pages (fillfactor 100,
the default) every update wrote a new entry in each of them, most of the tick's time at
100,000 instances. Rows already stored move to roomier pages as they are next rewritten."""

from django.db import migrations

FILLFACTOR = 45


def forwards(apps, schema_editor):
    schema_editor.execute(f"ALTER TABLE instances_instance SET (fillfactor = {FILLFACTOR})")


def backwards(apps, schema_editor):
    schema_editor.execute("ALTER TABLE instances_instance RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("instances", "0015_instance_checking")]

    operations = [migrations.RunPython(forwards, backwards)]
