"""The metering session moves to the instance's holding (compute.metering): a running hourly
instance's session goes on there from the minute it had billed, its postings keyed
usage:{instance}:{session}:{first}-{last} from then on (the minutes before were posted one by
one under usage:{instance}:{session}:{minute}, which no new key repeats)."""

from django.db import migrations

COPY = """
UPDATE compute_holding AS h
SET meter_key = 'usage:' || i.id || ':' || i.session,
    metered_since = i.running_since,
    metered_minutes = i.billed_minutes
FROM instances_instance AS i
WHERE h.id = i.id AND i.status = 'running' AND i.billing = 'hourly'
  AND i.running_since IS NOT NULL
"""

BACK = """
UPDATE instances_instance AS i SET billed_minutes = h.metered_minutes
FROM compute_holding AS h WHERE h.id = i.id AND h.metered_since IS NOT NULL
"""


class Migration(migrations.Migration):
    dependencies = [
        ("instances", "0024_queue_fields_moved_to_holdings"),
        ("compute", "0004_holding_meter"),
    ]

    operations = [
        migrations.RunSQL(COPY, reverse_sql=BACK),
        migrations.RemoveField(model_name="instance", name="billed_minutes"),
    ]
