"""Every instance's values copied into its new rows, each table in one INSERT ... SELECT: a
stop policy and a pod watch for every instance (the model keeps one for each from now on), a
monthly rental for each instance billed monthly and for any other that has paid a period (a
rental that ended is billed hourly but keeps its paid_until) or whose renewal was turned off
(an hourly order may say so; nothing is lost). Backwards, the values go back to
the instance's columns (0029 backwards has made them again) and the rows are deleted."""

from django.db import migrations

STOP_POLICY = (
    "idle_stop_util_pct",
    "idle_stop_minutes",
    "idle_warn_minutes",
    "idle_counted_from",
    "idle_warned_at",
    "idle_stop_due_at",
    "stop_at",
)
POD_WATCH = ("provisioning_since", "objects_created_at", "events_read_at", "seen_event_uids")
MONTHLY_RENTAL = ("paid_until", "monthly_period", "auto_renew")


def _copy(table: str, columns: tuple[str, ...], where: str = "") -> str:
    listed = ", ".join(columns)
    return (
        f"INSERT INTO {table} (instance_id, {listed}) "
        f"SELECT id, {listed} FROM instances_instance {where}"
    )


def _back(table: str, columns: tuple[str, ...]) -> list[str]:
    values = ", ".join(f"{column} = r.{column}" for column in columns)
    return [
        f"UPDATE instances_instance AS i SET {values} FROM {table} AS r WHERE r.instance_id = i.id",
        f"DELETE FROM {table}",
    ]


class Migration(migrations.Migration):
    dependencies = [
        ("instances", "0027_monthly_rental_stop_policy_pod_watch"),
    ]

    operations = [
        migrations.RunSQL(
            _copy("instances_stoppolicy", STOP_POLICY),
            reverse_sql=_back("instances_stoppolicy", STOP_POLICY),
        ),
        migrations.RunSQL(
            _copy("instances_podwatch", POD_WATCH),
            reverse_sql=_back("instances_podwatch", POD_WATCH),
        ),
        migrations.RunSQL(
            _copy(
                "instances_monthlyrental",
                MONTHLY_RENTAL,
                "WHERE billing = 'monthly' OR paid_until IS NOT NULL OR monthly_period > 0 "
                "OR NOT auto_renew",
            ),
            reverse_sql=_back("instances_monthlyrental", MONTHLY_RENTAL),
        ),
    ]
