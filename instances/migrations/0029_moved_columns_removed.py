"""The moved values live in their own rows now (0028): the instance's old columns go, and the
idle stop's check constraint and the scheduled stop's partial index move, under the same names,
onto the stop policy's table (the old ones are dropped first: an index name is the schema's)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('instances', '0028_monthly_rental_stop_policy_pod_watch_copied'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='instance',
            name='instance_idle_stop_whole',
        ),
        migrations.RemoveIndex(
            model_name='instance',
            name='instance_stop_at',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='auto_renew',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='events_read_at',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='idle_counted_from',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='idle_stop_due_at',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='idle_stop_minutes',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='idle_stop_util_pct',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='idle_warn_minutes',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='idle_warned_at',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='monthly_period',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='objects_created_at',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='paid_until',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='provisioning_since',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='seen_event_uids',
        ),
        migrations.RemoveField(
            model_name='instance',
            name='stop_at',
        ),
        migrations.AddIndex(
            model_name='stoppolicy',
            index=models.Index(condition=models.Q(('stop_at__isnull', False)), fields=['stop_at'], name='instance_stop_at'),
        ),
        migrations.AddConstraint(
            model_name='stoppolicy',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('idle_stop_minutes__isnull', True), ('idle_stop_util_pct__isnull', True)), models.Q(('idle_stop_minutes__isnull', False), ('idle_stop_util_pct__isnull', False)), _connector='OR'), name='instance_idle_stop_whole'),
        ),
    ]
