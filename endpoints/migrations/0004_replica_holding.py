import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    """A replica reaches its GPU holding (compute 0002) by their common id."""

    dependencies = [
        ("compute", "0002_holdings"),
        ("endpoints", "0003_catalog_moved_to_compute"),
    ]

    operations = [
        migrations.AddField(
            model_name="endpointreplica",
            name="holding",
            field=models.ForeignObject(
                default=None,
                from_fields=["id"],
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                related_query_name="replica",
                to="compute.holding",
                to_fields=["id"],
            ),
            preserve_default=False,
        ),
    ]
