"""The 简体中文 descriptions of the seeded public pool (manage.py seed_datasets) in databases
seeded before the field existed; a description an operator has already written is kept."""

from django.db import migrations


def seed(apps, schema_editor):
    from datasets.management.commands.seed_datasets import DESCRIPTIONS_ZH

    PublicDataset = apps.get_model("datasets", "PublicDataset")
    for dataset_id, text in DESCRIPTIONS_ZH.items():
        PublicDataset.objects.filter(pk=dataset_id, description_zh_hans="").update(
            description_zh_hans=text
        )


class Migration(migrations.Migration):
    dependencies = [("datasets", "0003_description_zh_hans")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
