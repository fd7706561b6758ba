
import django.db.models.deletion
import django.utils.timezone
import starverse.core.ids
from django.db import migrations, models

MOVED = [
    ("instances", "offering"),
    ("instances", "image"),
    ("instances", "tenantlimits"),
    ("fleet", "allocation"),
]


def move_content_types(apps, schema_editor):
    """Permissions and admin history follow the models to their new app."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    for old_app, model in MOVED:
        ContentType.objects.filter(app_label=old_app, model=model).update(app_label="compute")


def reverse_content_types(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for old_app, model in MOVED:
        ContentType.objects.filter(app_label="compute", model=model).update(app_label=old_app)


class Migration(migrations.Migration):
    """The catalog (offerings, images), the tenants' limits and the GPU allocations, moved from
    the instances and fleet apps with their tables."""


    initial = True

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('accounts', '0005_user_settings'),
        ('endpoints', '0002_sync_indexes'),
        ('fleet', '0011_allocations_moved_to_compute'),
        ('instances', '0022_engine_images'),
    ]

    operations = [
        # The tables stay where they are (db_table); only Django's idea of which app owns them
        # moves, so no row is copied or lost.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Image',
                    fields=[
                        ('id', models.SlugField(max_length=64, primary_key=True, serialize=False)),
                        ('name', models.CharField(help_text='In English; shown where no translation is.', max_length=100)),
                        ('name_zh_hans', models.CharField(blank=True, default='', help_text='Blank: the English name.', max_length=100, verbose_name='name (简体中文)')),
                        ('description', models.TextField()),
                        ('description_zh_hans', models.TextField(blank=True, default='', help_text='Blank: the English text.', verbose_name='description (简体中文)')),
                        ('container_image', models.CharField(max_length=300)),
                        ('size_bytes', models.BigIntegerField(default=0, help_text="Compressed size the nodes pull (the registry's), for the expected pull time.")),
                        ('prepull', models.BooleanField(default=False, help_text="Keep it on every node of the catalogue's GPU models (a pre-pull DaemonSet), so instances of it start in seconds.")),
                        ('active', models.BooleanField(default=True)),
                        ('sort', models.PositiveSmallIntegerField(default=0)),
                    ],
                    options={
                        'db_table': 'instances_image',
                        'ordering': ['sort', 'name'],
                    },
                ),
                migrations.CreateModel(
                    name='TenantLimits',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('max_queued_orders', models.PositiveIntegerField(blank=True, help_text='Orders waiting in the queue. Empty: MAX_QUEUED_ORDERS.', null=True)),
                        ('max_running_gpus', models.PositiveIntegerField(blank=True, help_text='GPUs held (starting, running, stopping) plus queued. Empty: MAX_RUNNING_GPUS.', null=True)),
                        ('trial_max_premium_gpus', models.PositiveIntegerField(blank=True, help_text='While the account has never paid in (trial credit only): GPUs of the premium models held plus queued. Empty: TRIAL_MAX_PREMIUM_GPUS.', null=True)),
                        ('note', models.TextField(blank=True, help_text='Why these limits (who asked, when).')),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('tenant', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='limits', to='accounts.tenant')),
                    ],
                    options={
                        'verbose_name': 'tenant limits',
                        'verbose_name_plural': 'tenant limits',
                        'db_table': 'instances_tenantlimits',
                    },
                ),
                migrations.CreateModel(
                    name='Allocation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('gpu_index', models.PositiveSmallIntegerField()),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('instance', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='allocations', to='instances.instance')),
                        ('node', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='allocations', to='fleet.node')),
                        ('replica', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='allocations', to='endpoints.endpointreplica')),
                    ],
                    options={
                        'db_table': 'instances_allocation',
                        'constraints': [models.UniqueConstraint(fields=('node', 'gpu_index'), name='allocation_gpu'), models.CheckConstraint(condition=models.Q(models.Q(('instance__isnull', False), ('replica__isnull', True)), models.Q(('instance__isnull', True), ('replica__isnull', False)), _connector='OR'), name='allocation_one_holder')],
                    },
                ),
                migrations.CreateModel(
                    name='Offering',
                    fields=[
                        ('id', starverse.core.ids.PublicIdField(editable=False, max_length=32, prefix='off', primary_key=True, serialize=False)),
                        ('name', models.CharField(help_text='In English; shown where no translation is.', max_length=100)),
                        ('name_zh_hans', models.CharField(blank=True, default='', help_text='Blank: the English name.', max_length=100, verbose_name='name (简体中文)')),
                        ('slug', models.SlugField(blank=True, help_text="A stable key for links and the cost calculator's presets, e.g. h100-80g-bare-metal.", max_length=64, null=True, unique=True)),
                        ('kind', models.CharField(choices=[('bare_metal', 'Bare metal (whole node)'), ('cloud', 'Cloud GPU')], max_length=16)),
                        ('gpu_count', models.PositiveSmallIntegerField()),
                        ('cpu_cores', models.PositiveIntegerField()),
                        ('memory_gb', models.PositiveIntegerField()),
                        ('local_disk_gb', models.PositiveIntegerField()),
                        ('price_per_hour_fen', models.BigIntegerField()),
                        ('price_per_month_fen', models.BigIntegerField(blank=True, null=True)),
                        ('trial_price_per_hour_fen', models.BigIntegerField(blank=True, help_text='What trial credit pays per hour of this offering (billed by the minute, at most the hourly price); blank: trial credit is not spent on it.', null=True)),
                        ('active', models.BooleanField(default=True)),
                        ('sort', models.PositiveSmallIntegerField(default=0)),
                        ('runtime_class', models.CharField(blank=True, default='', max_length=63)),
                        ('cluster_one_switch', models.BooleanField(default=False, help_text='Clusters of this (whole-node) offering are placed under one leaf switch only; an order that does not fit under one waits instead of spanning switches.')),
                        ('preflight_floor_gbps', models.FloatField(blank=True, help_text='Clusters of this (whole-node) offering are ready, and billed, only when the pre-flight all-reduce reaches this bus bandwidth, in GB/s as nccl-tests prints busbw (every node pair too); blank: any result passes.', null=True)),
                        ('gpu_model', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='offerings', to='fleet.gpumodel')),
                    ],
                    options={
                        'db_table': 'instances_offering',
                        'ordering': ['sort', 'gpu_model', 'gpu_count'],
                        'constraints': [models.CheckConstraint(condition=models.Q(('price_per_hour_fen__gt', 0)), name='offering_price'), models.CheckConstraint(condition=models.Q(('trial_price_per_hour_fen__isnull', True), models.Q(('trial_price_per_hour_fen__gte', 1), ('trial_price_per_hour_fen__lte', models.F('price_per_hour_fen'))), _connector='OR'), name='offering_trial_price', violation_error_message='The trial price must be at least 1 fen and at most the hourly price.'), models.CheckConstraint(condition=models.Q(('gpu_count__gte', 1), ('gpu_count__lte', 16)), name='offering_gpu_count')],
                    },
                ),
            ],
        ),
        migrations.RunPython(move_content_types, reverse_content_types),
    ]
