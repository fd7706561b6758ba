
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    """An endpoint's offering is the compute core's catalog now (state only)."""


    dependencies = [
        ('compute', '0001_catalog_and_allocations_moved_in'),
        ('endpoints', '0002_sync_indexes'),
    ]

    operations = [
        # The tables stay where they are (db_table); only Django's idea of which app owns them
        # moves, so no row is copied or lost.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='endpoint',
                    name='offering',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='compute.offering'),
                ),
            ],
        ),
    ]
