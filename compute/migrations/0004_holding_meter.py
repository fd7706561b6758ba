"""The meter's session on a holding (compute.metering): its key, start, minutes, and what it
accrued since its last hourly posting."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0005_user_settings'),
        ('compute', '0003_holding_parent'),
        ('fleet', '0011_allocations_moved_to_compute'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='holding',
            name='meter_key',
            field=models.CharField(blank=True, max_length=96),
        ),
        migrations.AddField(
            model_name='holding',
            name='metered_minutes',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='holding',
            name='metered_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='holding',
            name='pending_cash_fen',
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='holding',
            name='pending_minutes',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='holding',
            name='pending_promo_fen',
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='holding',
            name='pending_trial_minutes',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddIndex(
            model_name='holding',
            index=models.Index(condition=models.Q(('metered_since__isnull', False)), fields=['metered_since'], name='holding_metering'),
        ),
        migrations.AddConstraint(
            model_name='holding',
            constraint=models.CheckConstraint(condition=models.Q(('pending_cash_fen__gte', 0), ('pending_promo_fen__gte', 0)), name='holding_pending_non_negative'),
        ),
        # The meter's tick updates every metering holding each minute (its minutes and pending
        # money, no indexed column): room on each page keeps those updates HOT, as
        # instances_instance's fillfactor does for its cost.
        migrations.RunSQL(
            "ALTER TABLE compute_holding SET (fillfactor = 50)",
            reverse_sql="ALTER TABLE compute_holding RESET (fillfactor)",
        ),
    ]
