"""The generation whose objects converge last made sure of: the scheduler calls an endpoint
running only once it is its generation. An endpoint past its converge (running, scaled to
zero) has it already; one provisioning or updating gets it from its next converge, which the
lost-work handout sends."""

from django.db import migrations, models

CONVERGED = """
UPDATE endpoints_endpoint SET converged_generation = generation
WHERE status NOT IN ('provisioning', 'updating')
"""


class Migration(migrations.Migration):
    dependencies = [
        ("endpoints", "0005_metering_moved_to_holdings"),
    ]

    operations = [
        migrations.AddField(
            model_name="endpoint",
            name="converged_generation",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.RunSQL(CONVERGED, migrations.RunSQL.noop),
    ]
