import clusters.models
from django.db import migrations, models


def keys_give(apps, schema_editor):
    """Clusters made before keys were made with the row get theirs now (one ordered but never
    provisioned had none)."""
    Cluster = apps.get_model("clusters", "Cluster")
    for cluster in Cluster.objects.filter(ssh_private_key="").only("pk"):
        Cluster.objects.filter(pk=cluster.pk).update(ssh_private_key=clusters.models.ssh_key_new())


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0005_catalog_moved_to_compute"),
    ]

    operations = [
        migrations.AlterField(
            model_name="cluster",
            name="ssh_private_key",
            field=models.TextField(blank=True, default=clusters.models.ssh_key_new, editable=False),
        ),
        migrations.RunPython(keys_give, migrations.RunPython.noop),
    ]
