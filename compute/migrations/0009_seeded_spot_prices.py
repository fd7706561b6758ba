"""The seeded catalogue's offerings are offered as spot at 40 % of their hourly price
(instances.management.commands.seed_catalog.SPOT_SHARE); an operator's own offerings are left
unoffered (null) until the operator prices them."""

from django.db import migrations
from django.db.models import F


def seed(apps, schema_editor):
    Offering = apps.get_model("compute", "Offering")
    Offering.objects.filter(slug__isnull=False, spot_price_per_hour_fen__isnull=True).update(
        spot_price_per_hour_fen=F("price_per_hour_fen") * 40 / 100
    )
    Offering.objects.filter(spot_price_per_hour_fen=0).update(spot_price_per_hour_fen=None)


class Migration(migrations.Migration):
    dependencies = [
        ("compute", "0008_spot"),
        ("instances", "0020_seeded_catalog_trial_and_chinese"),
    ]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
