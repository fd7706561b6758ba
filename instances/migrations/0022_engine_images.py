"""The inference endpoints' engine images (deploy/images/tensorrt-llm-serve, vllm) in catalogs
seeded before they existed: added once, beside the seeded images, where the catalog was seeded
(its PyTorch image is there); a fresh database gets them from seed_catalog. A row an operator
already has under the same id is left alone."""

from django.db import migrations

ENGINE_IMAGES = ("tensorrt-llm-serve-0.17", "vllm-0.6")


def seed(apps, schema_editor):
    from instances.management.commands.seed_catalog import IMAGE_PULLS, IMAGES, IMAGES_ZH

    Image = apps.get_model("instances", "Image")
    if not Image.objects.filter(pk="pytorch-2.1").exists():
        return
    for sort, (key, name, description, reference) in enumerate(IMAGES):
        if key not in ENGINE_IMAGES:
            continue
        size_bytes, prepull = IMAGE_PULLS[key]
        Image.objects.get_or_create(
            id=key,
            defaults={
                "name": name,
                "name_zh_hans": IMAGES_ZH[key][0],
                "description": description,
                "description_zh_hans": IMAGES_ZH[key][1],
                "container_image": reference,
                "size_bytes": size_bytes,
                "prepull": prepull,
                "sort": sort,
            },
        )


class Migration(migrations.Migration):
    dependencies = [("instances", "0021_auto_stop")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
