"""The seeded catalog (manage.py seed_catalog) in databases seeded before these fields existed:
each seeded offering gets its slug, its trial price and its 简体中文 name, each seeded image its
简体中文 name and description. Rows are found by the seeded English name (offerings) or id
(images); a field an operator has already filled is left alone."""

from django.db import migrations
from django.db.models import Q


def seed(apps, schema_editor):
    from instances.management.commands.seed_catalog import (
        IMAGES_ZH,
        TRIAL_PRICES,
        offering_rows,
    )

    Offering = apps.get_model("instances", "Offering")
    Image = apps.get_model("instances", "Image")
    for slug, english, chinese, _model, _count in offering_rows():
        rows = Offering.objects.filter(name=english)
        if not Offering.objects.filter(slug=slug).exists():
            rows.filter(slug__isnull=True).update(slug=slug)
        rows.filter(name_zh_hans="").update(name_zh_hans=chinese)
        trial = TRIAL_PRICES.get(slug)
        if trial is not None:
            # within the offering's own hourly price, as the constraint demands
            rows.filter(
                Q(trial_price_per_hour_fen__isnull=True), price_per_hour_fen__gte=trial
            ).update(trial_price_per_hour_fen=trial)
    for image_id, (name, description) in IMAGES_ZH.items():
        rows = Image.objects.filter(pk=image_id)
        rows.filter(name_zh_hans="").update(name_zh_hans=name)
        rows.filter(description_zh_hans="").update(description_zh_hans=description)


class Migration(migrations.Migration):
    dependencies = [("instances", "0019_offering_trial_price_slug_and_chinese")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
