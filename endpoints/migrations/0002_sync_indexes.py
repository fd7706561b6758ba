"""Partial indexes for the endpoints' scheduler beat: whether any endpoint is live, and the
replicas still holding GPUs."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("endpoints", "0001_endpoints"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="endpoint",
            index=models.Index(
                condition=models.Q(
                    ("status__in", ("provisioning", "running", "scaled_to_zero", "updating"))
                ),
                fields=["status"],
                name="endpoint_live",
            ),
        ),
        migrations.AddIndex(
            model_name="endpointreplica",
            index=models.Index(
                condition=models.Q(("gone_at__isnull", True)),
                fields=["endpoint"],
                name="endpoint_replica_held",
            ),
        ),
    ]
