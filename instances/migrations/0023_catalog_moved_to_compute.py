
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    """The catalog and the tenants' limits leave this app for the compute core; their tables stay
    (see compute 0001)."""


    dependencies = [
        ('clusters', '0005_catalog_moved_to_compute'),
        ('compute', '0001_catalog_and_allocations_moved_in'),
        ('endpoints', '0003_catalog_moved_to_compute'),
        ('instances', '0022_engine_images'),
    ]

    operations = [
        # The tables stay where they are (db_table); only Django's idea of which app owns them
        # moves, so no row is copied or lost.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='instance',
                    name='image',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='compute.image'),
                ),
                migrations.RemoveField(
                    model_name='offering',
                    name='gpu_model',
                ),
                migrations.AlterField(
                    model_name='instance',
                    name='offering',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='compute.offering'),
                ),
                migrations.RemoveField(
                    model_name='tenantlimits',
                    name='tenant',
                ),
                migrations.DeleteModel(
                    name='Image',
                ),
                migrations.DeleteModel(
                    name='Offering',
                ),
                migrations.DeleteModel(
                    name='TenantLimits',
                ),
            ],
        ),
    ]
