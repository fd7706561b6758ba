
from django.db import migrations


class Migration(migrations.Migration):
    """Allocations leave this app for the compute core; their table stays (see compute 0001)."""


    dependencies = [
        ('fleet', '0010_node_review'),
    ]

    operations = [
        # The tables stay where they are (db_table); only Django's idea of which app owns them
        # moves, so no row is copied or lost.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(
                    name='Allocation',
                ),
            ],
        ),
    ]
