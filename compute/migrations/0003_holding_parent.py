from django.db import migrations, models

# A rank's holding serves its cluster, a replica's its endpoint: read from the rows the holdings
# were made for (an instance's stays blank).
BACKFILL = """
UPDATE compute_holding AS h SET parent = i.cluster_id
  FROM instances_instance AS i WHERE i.id = h.id AND i.cluster_id IS NOT NULL;
UPDATE compute_holding AS h SET parent = r.endpoint_id
  FROM endpoints_endpointreplica AS r WHERE r.id = h.id;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("compute", "0002_holdings"),
        ("endpoints", "0004_replica_holding"),
        ("instances", "0024_queue_fields_moved_to_holdings"),
    ]

    operations = [
        migrations.AddField(
            model_name="holding",
            name="parent",
            field=models.CharField(blank=True, db_index=True, max_length=32),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
    ]
