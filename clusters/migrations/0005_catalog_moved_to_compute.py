
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    """A cluster's offering and image are the compute core's catalog now (state only)."""


    dependencies = [
        ('clusters', '0004_cluster_checking_since'),
        ('compute', '0001_catalog_and_allocations_moved_in'),
    ]

    operations = [
        # The tables stay where they are (db_table); only Django's idea of which app owns them
        # moves, so no row is copied or lost.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='cluster',
                    name='image',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='compute.image'),
                ),
                migrations.AlterField(
                    model_name='cluster',
                    name='offering',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='compute.offering'),
                ),
            ],
        ),
    ]
