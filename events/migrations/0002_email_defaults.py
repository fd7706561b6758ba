"""The default e-mail channel for the accounts opened before every notice went through the
channels (billing.onboarding gives one to each new account): until then the products mailed a
job's end, the idle warning and the automatic stop, a low balance and a spot instance taken
back themselves, to a personal account's person and to a team's owners and admins. Each account gets the channel
that keeps those mails coming, once: an account that already has an e-mail channel chose its
own."""

from django.db import migrations

EMAIL_DEFAULTS = [
    "job.succeeded",
    "job.failed",
    "instance.idle_warning",
    "instance.auto_stopped",
    "balance.low",
    "instance.preempted",
]


def _people(apps):
    """(tenant, user, address) of each account without an e-mail channel: a personal account's
    person; a team's owners and admins of the day (an empty address, read at each send)."""
    channel = apps.get_model("events", "NotificationChannel")
    chose = channel.objects.filter(kind="email").values_list("tenant_id", flat=True)
    users = apps.get_model("accounts", "User").objects.filter(is_active=True)
    personal = users.filter(tenant__kind="personal").exclude(tenant_id__in=chose).exclude(email="")
    yield from personal.values_list("tenant_id", "pk", "email")
    teams = apps.get_model("accounts", "Tenant").objects.filter(kind="team").exclude(pk__in=chose)
    for team_id in teams.values_list("pk", flat=True):
        yield team_id, None, ""


def give_defaults(apps, schema_editor):
    channel = apps.get_model("events", "NotificationChannel")
    made = [
        channel(
            tenant_id=tenant_id,
            created_by_id=user_id,
            kind="email",
            target=email,
            events=EMAIL_DEFAULTS,
            language="zh-hans",
        )
        for tenant_id, user_id, email in list(_people(apps))
    ]
    channel.objects.bulk_create(made, batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [
        ("events", "0001_initial"),
        ("accounts", "0006_token_caps"),
    ]

    operations = [migrations.RunPython(give_defaults, migrations.RunPython.noop, elidable=True)]
