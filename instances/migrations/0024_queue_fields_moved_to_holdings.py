import django.db.models.deletion
from django.db import migrations, models


def queue_fields_back(apps, schema_editor):
    """Going back: the instances' queue fields come from their holdings again."""
    schema_editor.execute(
        "UPDATE instances_instance i SET queued_at = h.queued_at, "
        "unfunded_since = h.unfunded_since FROM compute_holding h WHERE h.id = i.id"
    )


class Migration(migrations.Migration):
    """An instance's place in the queue is its holding's (compute.Holding.queued_at,
    unfunded_since, copied there by compute 0002); the instance reaches its holding by their
    common id."""

    dependencies = [
        ("compute", "0002_holdings"),
        ("instances", "0023_catalog_moved_to_compute"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, queue_fields_back),
        migrations.RemoveField(model_name="instance", name="queued_at"),
        migrations.RemoveField(model_name="instance", name="unfunded_since"),
        # a relation over the id the instance and its holding share: no column of its own
        migrations.AddField(
            model_name="instance",
            name="holding",
            field=models.ForeignObject(
                default=None,
                from_fields=["id"],
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                related_query_name="instance",
                to="compute.holding",
                to_fields=["id"],
            ),
            preserve_default=False,
        ),
    ]
