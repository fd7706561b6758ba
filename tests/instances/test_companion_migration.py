"""Migrations 0027-0029 move an instance's monthly rental, stops and pod watch into rows of
their own with every value: instances as they were at 0025 come out of the migration with the
same values in the new tables (a rental only where one was billed monthly, had paid or turned
renewal off), and
migrating back puts them on the instance again."""

from datetime import timedelta
from typing import Any

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from tests.factories import make_instance, make_user
from tests.migration_graph import migrated_apps

BEFORE = [("instances", "0025_metering_moved_to_holdings")]


def _migrate(targets: list[tuple[str, str]]) -> Any:
    """Migrate to `targets` and return the models as they are there."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return migrated_apps(executor)


def test_the_moved_values_come_out_in_the_new_tables_and_go_back(transactional_db):
    user = make_user()
    monthly, hourly, ended = make_instance(user), make_instance(user), make_instance(user)
    no_renewal = make_instance(user)
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    now = timezone.now().replace(microsecond=0)
    old = _migrate(BEFORE)
    instances = old.get_model("instances", "Instance").objects
    instances.filter(pk=monthly.pk).update(
        billing="monthly", paid_until=now + timedelta(days=30), monthly_period=2, auto_renew=False
    )
    # a rental that ended is billed hourly and keeps its paid month
    instances.filter(pk=ended.pk).update(paid_until=now - timedelta(days=1), monthly_period=1)
    # an hourly order that turned renewal off keeps its word
    instances.filter(pk=no_renewal.pk).update(auto_renew=False)
    instances.filter(pk=hourly.pk).update(
        idle_stop_util_pct=7,
        idle_stop_minutes=45,
        idle_warn_minutes=12,
        idle_counted_from=now,
        idle_warned_at=now + timedelta(minutes=1),
        idle_stop_due_at=now + timedelta(minutes=2),
        stop_at=now + timedelta(hours=3),
        provisioning_since=now - timedelta(minutes=4),
        objects_created_at=now - timedelta(minutes=3),
        events_read_at=now - timedelta(minutes=2),
        seen_event_uids=["uid-1", "uid-2"],
    )

    new = _migrate(latest)

    rentals = new.get_model("instances", "MonthlyRental").objects
    assert sorted(
        rentals.values_list("instance_id", "paid_until", "monthly_period", "auto_renew")
    ) == sorted(
        [
            (monthly.pk, now + timedelta(days=30), 2, False),
            (ended.pk, now - timedelta(days=1), 1, True),
            (no_renewal.pk, None, 0, False),
        ]
    )
    policy = new.get_model("instances", "StopPolicy").objects.get(instance_id=hourly.pk)
    assert (
        policy.idle_stop_util_pct,
        policy.idle_stop_minutes,
        policy.idle_warn_minutes,
        policy.idle_counted_from,
        policy.idle_warned_at,
        policy.idle_stop_due_at,
        policy.stop_at,
    ) == (
        7,
        45,
        12,
        now,
        now + timedelta(minutes=1),
        now + timedelta(minutes=2),
        now + timedelta(hours=3),
    )
    watch = new.get_model("instances", "PodWatch").objects.get(instance_id=hourly.pk)
    assert (
        watch.provisioning_since,
        watch.objects_created_at,
        watch.events_read_at,
        watch.seen_event_uids,
    ) == (
        now - timedelta(minutes=4),
        now - timedelta(minutes=3),
        now - timedelta(minutes=2),
        ["uid-1", "uid-2"],
    )
    # every instance has its stop policy and pod watch
    assert new.get_model("instances", "StopPolicy").objects.count() == 4
    assert new.get_model("instances", "PodWatch").objects.count() == 4

    back = _migrate(BEFORE)

    row = back.get_model("instances", "Instance").objects.get(pk=hourly.pk)
    assert (row.stop_at, row.idle_stop_minutes, row.seen_event_uids) == (
        now + timedelta(hours=3),
        45,
        ["uid-1", "uid-2"],
    )
    row = back.get_model("instances", "Instance").objects.get(pk=monthly.pk)
    assert (row.paid_until, row.monthly_period, row.auto_renew) == (
        now + timedelta(days=30),
        2,
        False,
    )
    _migrate(latest)
