"""The metering session moves to the replica's holding (compute.metering): a Ready replica's
session goes on there from the minute it had billed, its postings keyed
endpoint:{replica}:{session}:{first}-{last} from then on."""

from django.db import migrations

COPY = """
UPDATE compute_holding AS h
SET meter_key = 'endpoint:' || r.id || ':' || r.session,
    metered_since = r.ready_since,
    metered_minutes = r.billed_minutes
FROM endpoints_endpointreplica AS r
WHERE h.id = r.id AND r.ready_since IS NOT NULL AND r.gone_at IS NULL
"""

BACK = """
UPDATE endpoints_endpointreplica AS r SET billed_minutes = h.metered_minutes
FROM compute_holding AS h WHERE h.id = r.id AND h.metered_since IS NOT NULL
"""


class Migration(migrations.Migration):
    dependencies = [
        ("endpoints", "0004_replica_holding"),
        ("compute", "0004_holding_meter"),
    ]

    operations = [
        migrations.RunSQL(COPY, reverse_sql=BACK),
        migrations.RemoveField(model_name="endpointreplica", name="billed_minutes"),
    ]
