"""Three concerns of an instance move out of its row into rows of their own, one to one: a
monthly rental's periods (MonthlyRental), its idle and scheduled stops (StopPolicy) and its
provisioning's bookkeeping on the cluster (PodWatch). This makes their tables; 0028 copies the
values, 0029 drops the old columns (and moves the stop's constraint and index)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('instances', '0026_ranks_moved_to_clusters'),
    ]

    operations = [
        migrations.CreateModel(
            name='MonthlyRental',
            fields=[
                ('instance', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='monthly', serialize=False, to='instances.instance')),
                ('paid_until', models.DateTimeField(blank=True, help_text='Monthly: prepaid until.', null=True)),
                ('monthly_period', models.PositiveIntegerField(default=0, help_text='Monthly: periods paid.')),
                ('auto_renew', models.BooleanField(default=True, help_text='Monthly: renew at period end.')),
            ],
        ),
        migrations.CreateModel(
            name='PodWatch',
            fields=[
                ('instance', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='pod_watch', serialize=False, to='instances.instance')),
                ('provisioning_since', models.DateTimeField(blank=True, help_text='When this provisioning began (its timeout runs from it).', null=True)),
                ('objects_created_at', models.DateTimeField(blank=True, help_text="When this provisioning's objects were created on the cluster; until then they are created, after it the pod is only watched.", null=True)),
                ('events_read_at', models.DateTimeField(blank=True, help_text="When the pod's Kubernetes events were last read.", null=True)),
                ('seen_event_uids', models.JSONField(blank=True, default=list)),
            ],
        ),
        migrations.CreateModel(
            name='StopPolicy',
            fields=[
                ('instance', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='stop_policy', serialize=False, to='instances.instance')),
                ('idle_stop_util_pct', models.PositiveSmallIntegerField(blank=True, null=True)),
                ('idle_stop_minutes', models.PositiveSmallIntegerField(blank=True, null=True)),
                ('idle_warn_minutes', models.PositiveSmallIntegerField(default=10)),
                ('idle_counted_from', models.DateTimeField(blank=True, help_text='Idle time counts from here at the earliest: the last Keep running, or the last change of the idle stop.', null=True)),
                ('idle_warned_at', models.DateTimeField(blank=True, null=True)),
                ('idle_stop_due_at', models.DateTimeField(blank=True, help_text="Warned: it stops at this time if it stays idle (the console's banner).", null=True)),
                ('stop_at', models.DateTimeField(blank=True, help_text="A scheduled stop (the user's, or the order's hours).", null=True)),
            ],
        ),
    ]
