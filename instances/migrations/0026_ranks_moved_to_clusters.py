"""An instance's cluster and rank now live in the clusters app (clusters migration 0007 copied
them to clusters.Rank); the columns go. Going back, they are filled again from that table."""

from django.db import migrations

BACK = """
UPDATE instances_instance AS i SET cluster_id = r.cluster_id, rank = r.index
FROM clusters_rank AS r WHERE r.instance_id = i.id
"""


class Migration(migrations.Migration):
    dependencies = [
        ("instances", "0025_metering_moved_to_holdings"),
        ("clusters", "0007_ranks"),
    ]

    operations = [
        migrations.RunSQL(migrations.RunSQL.noop, reverse_sql=BACK),
        migrations.RemoveConstraint(model_name="instance", name="instance_cluster_rank"),
        migrations.RemoveField(model_name="instance", name="cluster"),
        migrations.RemoveField(model_name="instance", name="rank"),
    ]
