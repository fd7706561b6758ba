"""A cluster's ranks move from the instance's row (Instance.cluster, Instance.rank) to the
clusters app's own table, clusters.Rank: every instance that was ever a cluster's rank gets its
row, with its number (null for one removed by scaling down). Instances now know a rank only as
one of a gang (its holding's `gang`, the cluster's id): a removed rank leaves its gang here.
The instances app drops its two columns after this (instances migration 0026)."""

import django.db.models.deletion
from django.db import migrations, models

COPY = """
INSERT INTO clusters_rank (instance_id, cluster_id, index)
SELECT id, cluster_id, rank FROM instances_instance WHERE cluster_id IS NOT NULL
"""

# A rank removed by scaling down is no longer placed, queued or started with its cluster.
LEAVE = """
UPDATE compute_holding AS h SET gang = ''
FROM instances_instance AS i
WHERE h.id = i.id AND i.cluster_id IS NOT NULL AND i.rank IS NULL
"""

REJOIN = """
UPDATE compute_holding AS h SET gang = i.cluster_id
FROM instances_instance AS i
WHERE h.id = i.id AND i.cluster_id IS NOT NULL AND i.rank IS NULL
"""


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0006_cluster_key_at_order"),
        ("compute", "0004_holding_meter"),
        ("instances", "0025_metering_moved_to_holdings"),
    ]

    operations = [
        migrations.CreateModel(
            name="Rank",
            fields=[
                (
                    "instance",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="cluster_rank",
                        serialize=False,
                        to="instances.instance",
                    ),
                ),
                ("index", models.PositiveSmallIntegerField(blank=True, null=True)),
                (
                    "cluster",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="ranks",
                        to="clusters.cluster",
                    ),
                ),
            ],
            options={
                "ordering": ["cluster", "index"],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("index__isnull", False)),
                        fields=("cluster", "index"),
                        name="rank_cluster_index",
                    )
                ],
            },
        ),
        migrations.RunSQL(COPY, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(LEAVE, reverse_sql=REJOIN),
    ]
