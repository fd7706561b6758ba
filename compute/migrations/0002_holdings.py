import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

# Instance states that hold GPUs (instances.choices.HOLDS_GPUS when this was written).
HOLDS_GPUS = ("provisioning", "checking", "running", "stopping")


def _instance_holdings(apps, allocated):
    Holding = apps.get_model("compute", "Holding")
    Instance = apps.get_model("instances", "Instance")
    rows = []
    for instance in Instance.objects.all().iterator():
        if instance.id in allocated:
            state = "placed"
        elif instance.status == "queued":
            state = "queued"
        else:
            state = "released"
        rows.append(
            Holding(
                id=instance.id,
                kind="rank" if instance.cluster_id else "instance",
                tenant_id=instance.tenant_id,
                created_by_id=instance.created_by_id,
                offering_id=instance.offering_id,
                billing=instance.billing,
                state=state,
                region_id=instance.region_id,
                gang=instance.cluster_id or "",
                queued_at=instance.queued_at if state == "queued" else None,
                unfunded_since=instance.unfunded_since if state == "queued" else None,
                created_at=instance.created_at,
            )
        )
    Holding.objects.bulk_create(rows, batch_size=2000)


def _replica_holdings(apps, allocated):
    Holding = apps.get_model("compute", "Holding")
    Replica = apps.get_model("endpoints", "EndpointReplica")
    rows = []
    for replica in Replica.objects.select_related("endpoint", "node").iterator():
        endpoint = replica.endpoint
        rows.append(
            Holding(
                id=replica.id,
                kind="replica",
                tenant_id=endpoint.tenant_id,
                created_by_id=endpoint.created_by_id,
                offering_id=endpoint.offering_id,
                billing="hourly",
                state="placed" if replica.id in allocated else "released",
                region_id=replica.node.region_id if replica.node else None,
                created_at=replica.created_at,
            )
        )
    Holding.objects.bulk_create(rows, batch_size=2000)


def holdings_backfill(apps, schema_editor):
    """A holding for every instance (and cluster rank) and every endpoint replica, with the id
    of its row, the queue's fields taken from the instance; every allocation points at it."""
    Allocation = apps.get_model("compute", "Allocation")
    allocated = set(
        Allocation.objects.values_list("instance_id", flat=True).exclude(instance_id=None)
    ) | set(Allocation.objects.values_list("replica_id", flat=True).exclude(replica_id=None))
    _instance_holdings(apps, allocated)
    _replica_holdings(apps, allocated)
    schema_editor.execute(
        "UPDATE instances_allocation SET holding_id = COALESCE(instance_id, replica_id)"
    )


def allocations_back(apps, schema_editor):
    """Going back: each allocation names its instance or its replica again."""
    schema_editor.execute(
        "UPDATE instances_allocation a SET instance_id = h.id FROM compute_holding h "
        "WHERE h.id = a.holding_id AND h.kind <> 'replica'"
    )
    schema_editor.execute(
        "UPDATE instances_allocation a SET replica_id = h.id FROM compute_holding h "
        "WHERE h.id = a.holding_id AND h.kind = 'replica'"
    )


# Every instance and every replica has its holding, of the same id: enforced by the database,
# checked at commit (the product's row and its holding are written in one transaction, in
# either order).
PRODUCT_ROWS = [("instances_instance", "instance"), ("endpoints_endpointreplica", "replica")]
HOLDING_KEYS = [
    migrations.RunSQL(
        f"ALTER TABLE {table} ADD CONSTRAINT {table}_holding FOREIGN KEY (id) "
        "REFERENCES compute_holding (id) DEFERRABLE INITIALLY DEFERRED",
        f"ALTER TABLE {table} DROP CONSTRAINT {table}_holding",
    )
    for table, _kind in PRODUCT_ROWS
]


class Migration(migrations.Migration):
    """The compute core's GPU holdings: one for every instance, cluster rank and endpoint
    replica, made from their rows; allocations point at holdings instead of at instances and
    replicas."""

    dependencies = [
        ("accounts", "0005_user_settings"),
        ("compute", "0001_catalog_and_allocations_moved_in"),
        ("endpoints", "0003_catalog_moved_to_compute"),
        ("fleet", "0011_allocations_moved_to_compute"),
        ("instances", "0023_catalog_moved_to_compute"),
    ]

    operations = [
        migrations.CreateModel(
            name="Holding",
            fields=[
                ("id", models.CharField(max_length=32, primary_key=True, serialize=False)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("instance", "Instance"),
                            ("rank", "Cluster rank"),
                            ("replica", "Endpoint replica"),
                        ],
                        max_length=16,
                    ),
                ),
                (
                    "billing",
                    models.CharField(
                        choices=[
                            ("hourly", "Pay as you go (per minute)"),
                            ("monthly", "Monthly"),
                        ],
                        default="hourly",
                        max_length=16,
                    ),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("queued", "Waiting for GPUs"),
                            ("placed", "Holding GPUs"),
                            ("released", "Holding none"),
                        ],
                        default="queued",
                        max_length=16,
                    ),
                ),
                ("gang", models.CharField(blank=True, max_length=32)),
                ("queued_at", models.DateTimeField(blank=True, null=True)),
                (
                    "unfunded_since",
                    models.DateTimeField(
                        blank=True,
                        help_text="Queued: when its turn came and the balance did not cover its "
                        "runway. The queue passes it over; it fails after "
                        "QUEUE_UNFUNDED_GRACE_MINUTES unless topped up.",
                        null=True,
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "created_by",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.user",
                    ),
                ),
                (
                    "offering",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="compute.offering",
                    ),
                ),
                (
                    "region",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="fleet.region",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        condition=models.Q(("state", "queued")),
                        fields=["queued_at", "id"],
                        name="holding_queue",
                    ),
                    models.Index(
                        condition=models.Q(("gang", ""), _negated=True),
                        fields=["gang"],
                        name="holding_gang",
                    ),
                ],
            },
        ),
        migrations.AddField(
            model_name="allocation",
            name="holding",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="allocations",
                to="compute.holding",
            ),
        ),
        migrations.RunPython(holdings_backfill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="allocation",
            name="holding",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="allocations",
                to="compute.holding",
            ),
        ),
        migrations.RemoveConstraint(model_name="allocation", name="allocation_one_holder"),
        migrations.RunPython(migrations.RunPython.noop, allocations_back),
        migrations.RemoveField(model_name="allocation", name="instance"),
        migrations.RemoveField(model_name="allocation", name="replica"),
        *HOLDING_KEYS,
    ]
