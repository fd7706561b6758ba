"""Idle auto-stop and scheduled stops: an instance whose every GPU stays below its threshold is
warned once, then stopped through the stop path with a timeline row and an e-mail; Keep running
snoozes it; a scheduled stop stops it at its time; the minute's scan reads every candidate in
one query; and the money the stops saved is counted honestly."""

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from compute.models import Allocation, Offering
from fleet.models import Gpu, GpuSample
from instances.autostop import auto_stop_savings, idle_run, schedules_run
from instances.lifecycle import instance_order
from instances.models import AutoStop, Instance, InstanceEvent, StopPolicy
from instances.provisioning import converge
from instances.schedules import IdleStop
from instances.tasks import auto_stop
from tests.factories import IMAGE, converge_until, fund, make_cluster, make_instance, make_user

pytestmark = pytest.mark.django_db


def running(user: Any, *, gpus: int = 1, idle: Any = None, **order: Any) -> Instance:
    """A running cloud instance of `gpus` H100s, ordered with `idle` ({util_pct, minutes},
    None for none; default: 5 % for 30 minutes)."""
    offering = Offering.objects.get(gpu_model_id="h100-80g", kind="cloud", gpu_count=gpus)
    fund(user, offering.price_per_hour_fen * 3, key=f"run:{offering.id}:{order.get('name', '')}")
    instance, _created = instance_order(
        user=user,
        offering_id=offering.id,
        image_id=IMAGE,
        idle_stop=IdleStop(5, 30) if idle is None else idle,
        **order,
    )
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    return instance


def gpus_of(instance: Instance) -> list[Gpu]:
    """The instance's GPUs as the node agent's inventory made them."""
    found = []
    for allocation in Allocation.objects.filter(holding__instance=instance).order_by("gpu_index"):
        gpu, _new = Gpu.objects.get_or_create(
            node_id=allocation.node_id,
            index=allocation.gpu_index,
            defaults={"uuid": f"GPU-{allocation.node_id}-{allocation.gpu_index}", "product": "x"},
        )
        found.append(gpu)
    return found


def report(
    instance: Instance, *, start: Any, end: Any, util: Any = 0, only: Any = None, step: int = 15
) -> None:
    """Samples every `step` seconds from `start` to `end` for each of the instance's GPUs (or
    the GPU indices in `only`) at utilisation `util`."""
    rows = []
    for gpu in gpus_of(instance):
        if only is not None and gpu.index not in only:
            continue
        at = start
        while at <= end:
            rows.append(GpuSample(gpu=gpu, at=at, util=util))
            at += timedelta(seconds=step)
    GpuSample.objects.bulk_create(rows)


def since_running(instance: Instance, minutes: float) -> Any:
    """The instance, as if it had been running for `minutes` (its samples come after)."""
    started = timezone.now() - timedelta(minutes=minutes)
    Instance.objects.filter(pk=instance.pk).update(running_since=started)
    StopPolicy.objects.filter(instance=instance).update(idle_counted_from=None)
    return started


def messages(instance: Instance) -> list[str]:
    return [event.text for event in instance.events.order_by("at", "id")]


@pytest.fixture
def renter(catalog: Any) -> Any:
    return make_user()


def test_an_idle_instance_is_warned_then_stopped_with_timeline_and_e_mail(
    renter, django_capture_on_commit_callbacks
):
    instance = running(renter)
    started = since_running(instance, 40)
    report(instance, start=started, end=timezone.now(), util=3)
    now = timezone.now()

    with django_capture_on_commit_callbacks(execute=True):
        first = idle_run(now=now)
    instance.refresh_from_db()

    # idle for its whole 30 minutes, but not warned yet: the warning comes first, and the
    # stop its lead time (10 minutes) after it
    assert first.warned == [instance.id] and first.stopped == []
    assert instance.status == "running"
    assert instance.stop_policy.idle_stop_due_at == now + timedelta(minutes=10)
    assert "Keep running" in messages(instance)[-1]
    [warning] = mail.outbox  # through the account's default e-mail channel
    assert warning.subject == f"Instance {instance.name} is idle and stops soon."
    assert warning.to == [renter.email]

    report(instance, start=now + timedelta(seconds=15), end=now + timedelta(minutes=10), util=3)
    later = now + timedelta(minutes=10)
    with django_capture_on_commit_callbacks(execute=True):
        second = idle_run(now=later)
    instance.refresh_from_db()

    assert second.stopped == [instance.id]
    assert instance.status == "stopped"  # through the stop path: the pod is gone, disk kept
    assert instance.stop_policy.idle_stop_due_at is None
    assert "Stopped: idle for 30 min (every GPU below 5 %)." in messages(instance)
    assert len(mail.outbox) == 2
    assert mail.outbox[1].subject == f"Instance {instance.name} was stopped automatically."
    stop = AutoStop.objects.get(instance=instance)
    assert (stop.kind, stop.at, stop.price_per_hour_fen) == (
        "idle",
        later,
        instance.offering.price_per_hour_fen,
    )


def test_warned_at_the_warning_time_and_stopped_at_the_idle_time(renter):
    instance = running(renter)
    started = since_running(instance, 21)
    report(instance, start=started, end=timezone.now(), util=0)
    now = timezone.now()

    assert idle_run(now=now).warned == [instance.id]
    instance.refresh_from_db()
    # idle since its first sample, 21 minutes ago: warned with its whole lead time (10
    # minutes), so it stops at the time the warning gave, though idle 30 minutes before it;
    # never earlier than the time the mail and the banner said
    assert instance.stop_policy.idle_stop_due_at == now + timedelta(minutes=10)
    report(instance, start=now + timedelta(seconds=1), end=now + timedelta(minutes=10), util=0)
    assert idle_run(now=now + timedelta(minutes=9)).stopped == []
    assert now + timedelta(minutes=9) - started >= timedelta(minutes=30)
    assert idle_run(now=now + timedelta(minutes=10)).stopped == [instance.id]


def test_the_warning_is_sent_once(renter, django_capture_on_commit_callbacks):
    instance = running(renter)
    started = since_running(instance, 22)
    report(instance, start=started, end=timezone.now() + timedelta(minutes=2), util=1)
    now = timezone.now()

    with django_capture_on_commit_callbacks(execute=True):
        idle_run(now=now)
        again = idle_run(now=now + timedelta(minutes=1))
        third = idle_run(now=now + timedelta(minutes=2))

    assert again.warned == [] and third.warned == []
    assert len(mail.outbox) == 1
    assert sum("Keep running" in m for m in messages(instance)) == 1


def test_one_busy_gpu_keeps_a_multi_gpu_instance_running(renter):
    instance = running(renter, gpus=2)
    started = since_running(instance, 45)
    now = timezone.now()
    report(instance, start=started, end=now, util=0, only={gpus_of(instance)[0].index})
    report(instance, start=started, end=now, util=0, only={gpus_of(instance)[1].index})
    # one sample of the second GPU at the threshold, ten minutes ago
    GpuSample.objects.create(gpu=gpus_of(instance)[1], at=now - timedelta(minutes=10), util=5)

    run = idle_run(now=now)

    assert run.warned == [] and run.stopped == []
    instance.refresh_from_db()
    assert (instance.status, instance.stop_policy.idle_warned_at) == ("running", None)


def test_every_gpu_below_stops_a_multi_gpu_instance(renter):
    instance = running(renter, gpus=2)
    started = since_running(instance, 45)
    now = timezone.now()
    report(instance, start=started, end=now, util=4)

    assert idle_run(now=now).warned == [instance.id]
    report(instance, start=now + timedelta(seconds=1), end=now + timedelta(minutes=10), util=4)
    assert idle_run(now=now + timedelta(minutes=10)).stopped == [instance.id]


def test_no_samples_is_not_idle(renter):
    instance = running(renter)
    since_running(instance, 60)

    run = idle_run(now=timezone.now())

    assert run.warned == [] and run.stopped == []


def test_a_silent_gpu_is_not_idle(renter):
    instance = running(renter, gpus=2)
    started = since_running(instance, 60)
    now = timezone.now()
    first, second = gpus_of(instance)
    report(instance, start=started, end=now, util=0, only={first.index})
    # the second GPU stopped reporting five minutes ago
    report(instance, start=started, end=now - timedelta(minutes=5), util=0, only={second.index})

    run = idle_run(now=now)

    assert run.warned == [] and run.stopped == []


def test_samples_that_do_not_cover_the_window_are_not_idle_for_it(renter):
    instance = running(renter)
    since_running(instance, 60)
    now = timezone.now()
    # the agent came back eight minutes ago, after a silence: idle for eight minutes only
    report(instance, start=now - timedelta(minutes=8), end=now, util=0)

    assert idle_run(now=now).warned == []


def test_a_sample_without_a_reading_counts_as_busy(renter):
    instance = running(renter)
    started = since_running(instance, 45)
    now = timezone.now()
    report(instance, start=started, end=now, util=0)
    GpuSample.objects.create(gpu=gpus_of(instance)[0], at=now - timedelta(minutes=3), util=None)

    assert idle_run(now=now).warned == []


def test_an_instance_without_idle_stop_is_never_stopped(renter):
    offering = Offering.objects.get(gpu_model_id="h100-80g", kind="cloud", gpu_count=1)
    fund(renter, offering.price_per_hour_fen * 3, key="off")
    instance, _ = instance_order(
        user=renter, offering_id=offering.id, image_id=IMAGE, idle_stop=None
    )
    converge_until(converge.provision, instance.id)
    started = since_running(instance, 60)
    report(instance, start=started, end=timezone.now(), util=0)

    run = idle_run(now=timezone.now())

    assert run.warned == [] and run.stopped == []
    instance.refresh_from_db()
    assert (instance.stop_policy.idle_stop_util_pct, instance.stop_policy.idle_stop_minutes) == (
        None,
        None,
    )


def test_keep_running_snoozes_for_the_idle_time_from_now(renter, client_for):
    instance = running(renter)
    started = since_running(instance, 25)
    report(instance, start=started, end=timezone.now(), util=0)
    assert idle_run(now=timezone.now()).warned == [instance.id]

    answer = client_for(renter).post(f"/api/v1/instances/{instance.id}/keep-running")

    assert answer.status_code == 200, answer.content
    assert answer.json()["idle_stop_due_at"] is None
    instance.refresh_from_db()
    snoozed = instance.stop_policy.idle_counted_from
    assert snoozed is not None
    assert (
        instance.stop_policy.idle_warned_at is None
        and instance.stop_policy.idle_stop_due_at is None
    )
    assert "Keep running" in messages(instance)[-1]
    # idle all along: no warning until 20 minutes after the snooze, the stop at 30, or at the
    # warning's time when the minute's beat warned a little late
    report(instance, start=snoozed, end=snoozed + timedelta(minutes=31), util=0)
    assert idle_run(now=snoozed + timedelta(minutes=19)).warned == []
    assert idle_run(now=snoozed + timedelta(minutes=20, seconds=30)).warned == [instance.id]
    instance.refresh_from_db()
    assert instance.stop_policy.idle_stop_due_at == snoozed + timedelta(minutes=30, seconds=30)
    assert idle_run(now=snoozed + timedelta(minutes=30)).stopped == []
    assert idle_run(now=snoozed + timedelta(minutes=30, seconds=30)).stopped == [instance.id]


def test_keep_running_needs_an_idle_stop_and_a_running_instance(renter, client_for):
    instance = make_instance(renter)  # provisioning
    client = client_for(renter)

    answer = client.post(f"/api/v1/instances/{instance.id}/keep-running")
    assert (answer.status_code, answer.json()["code"]) == (409, "wrong_state")

    client.patch(f"/api/v1/instances/{instance.id}", {"idle_stop": None}, format="json")
    answer = client.post(f"/api/v1/instances/{instance.id}/keep-running")
    assert (answer.status_code, answer.json()["code"]) == (409, "idle_stop_off")


def test_busy_again_after_the_warning_takes_the_banner_down(renter):
    instance = running(renter)
    started = since_running(instance, 22)
    now = timezone.now()
    report(instance, start=started, end=now, util=0)
    idle_run(now=now)
    GpuSample.objects.create(gpu=gpus_of(instance)[0], at=now + timedelta(seconds=30), util=80)
    report(instance, start=now + timedelta(seconds=45), end=now + timedelta(minutes=1), util=0)

    run = idle_run(now=now + timedelta(minutes=1))

    assert run.cleared == [instance.id] and run.stopped == []
    instance.refresh_from_db()
    assert instance.stop_policy.idle_stop_due_at is None


def test_a_scheduled_stop_stops_at_its_time(renter, client_for, django_capture_on_commit_callbacks):
    instance = running(renter, stop_after_hours=2)
    instance.refresh_from_db()
    assert instance.stop_policy.stop_at is not None
    assert abs(instance.stop_policy.stop_at - (timezone.now() + timedelta(hours=2))) < timedelta(
        minutes=1
    )

    assert schedules_run(now=instance.stop_policy.stop_at - timedelta(seconds=1)) == []
    with django_capture_on_commit_callbacks(execute=True):
        assert schedules_run(now=instance.stop_policy.stop_at) == [instance.id]

    stopped = Instance.objects.get(pk=instance.pk)
    assert (stopped.status, stopped.stop_policy.stop_at) == ("stopped", None)
    assert "Stopped at the scheduled time." in messages(instance)
    assert AutoStop.objects.get(instance=instance).kind == "schedule"
    assert mail.outbox[-1].subject == f"Instance {instance.name} was stopped automatically."


def test_a_schedule_due_while_stopped_is_used_up(renter):
    instance = running(renter)
    future = timezone.now() + timedelta(hours=1)
    Instance.objects.filter(pk=instance.pk).update(status="stopped")
    StopPolicy.objects.filter(instance=instance).update(stop_at=future)

    assert schedules_run(now=future) == []
    instance.refresh_from_db()
    assert (instance.status, instance.stop_policy.stop_at) == ("stopped", None)
    assert not AutoStop.objects.exists()


def test_the_beat_task_runs_both(renter, settings):
    assert "auto-stop" in settings.CELERY_BEAT_SCHEDULE
    assert settings.CELERY_BEAT_SCHEDULE["auto-stop"]["task"] == "instances.tasks.auto_stop"
    instance = running(renter)
    StopPolicy.objects.filter(instance=instance).update(
        stop_at=timezone.now() - timedelta(seconds=1)
    )

    auto_stop()

    instance.refresh_from_db()
    assert instance.status in ("stopping", "stopped")


def _scan_queries(now: Any) -> int:
    with CaptureQueriesContext(connection) as queries:
        run = idle_run(now=now)
    assert run.warned == [] and run.stopped == []
    return len(queries)


def test_the_scan_reads_every_candidate_in_one_query(renter):
    instances = [running(renter, name=f"job{i}") for i in range(6)]
    now = timezone.now()
    for instance in instances:
        started = since_running(instance, 40)
        report(instance, start=started, end=now, util=90, step=60)  # busy
    few = _scan_queries(now)
    StopPolicy.objects.filter(instance__in=instances[2:]).update(
        idle_stop_util_pct=None, idle_stop_minutes=None
    )
    fewer = _scan_queries(now)

    assert few == fewer == 1


# --- the order, PATCH and validation ------------------------------------------------------


def order(client: Any, **body: Any) -> Any:
    offering = Offering.objects.get(gpu_model_id="h100-80g", kind="cloud", gpu_count=1)
    return client.post(
        "/api/v1/instances",
        {"offering": offering.id, "image": IMAGE, **body},
        format="json",
    )


def test_an_order_takes_the_users_defaults(renter, client_for):
    fund(renter, 100_000)
    answer = order(client_for(renter))

    assert answer.status_code == 202, answer.content
    assert answer.json()["idle_stop"] == {"util_pct": 5, "minutes": 30}
    assert answer.json()["stop_at"] is None


def test_an_order_can_opt_out_or_set_its_own(renter, client_for):
    fund(renter, 100_000)
    client = client_for(renter)

    assert order(client, idle_stop=None).json()["idle_stop"] is None
    own = order(client, idle_stop={"util_pct": 20, "minutes": 60}, stop_after_hours=3).json()

    assert own["idle_stop"] == {"util_pct": 20, "minutes": 60}
    instance = Instance.objects.get(pk=own["id"])
    assert instance.stop_policy.stop_at is not None
    assert abs(instance.stop_policy.stop_at - (timezone.now() + timedelta(hours=3))) < timedelta(
        minutes=1
    )


def test_the_users_settings_change_the_defaults(renter, client_for):
    fund(renter, 100_000)
    client = client_for(renter)
    answer = client.patch(
        "/api/v1/account/settings",
        {"idle_stop_minutes": 90, "idle_warn_minutes": 15},
        format="json",
    )
    assert answer.status_code == 200, answer.content
    assert answer.json() == {
        "idle_stop_enabled": True,
        "idle_stop_util_pct": 5,
        "idle_stop_minutes": 90,
        "idle_warn_minutes": 15,
    }

    placed = order(client).json()
    assert placed["idle_stop"] == {"util_pct": 5, "minutes": 90}
    assert StopPolicy.objects.get(instance_id=placed["id"]).idle_warn_minutes == 15

    client.patch("/api/v1/account/settings", {"idle_stop_enabled": False}, format="json")
    assert order(client).json()["idle_stop"] is None


def test_the_settings_are_validated_and_read(renter, client_for):
    client = client_for(renter)
    assert client.get("/api/v1/account/settings").json()["idle_stop_minutes"] == 30

    answer = client.patch("/api/v1/account/settings", {"idle_stop_util_pct": 0}, format="json")

    assert answer.status_code == 400
    assert list(answer.json()["errors"]) == ["idle_stop_util_pct"]
    assert client.get("/api/v1/account/settings").json()["idle_stop_util_pct"] == 5


@pytest.mark.parametrize(
    ("idle_stop", "field"),
    [
        ({"util_pct": 0, "minutes": 30}, "idle_stop.util_pct"),
        ({"util_pct": 101, "minutes": 30}, "idle_stop.util_pct"),
        ({"util_pct": 5, "minutes": 9}, "idle_stop.minutes"),
        ({"util_pct": 5, "minutes": 1441}, "idle_stop.minutes"),
        ({"util_pct": 5}, "idle_stop.minutes"),
    ],
)
def test_an_orders_idle_stop_is_validated(renter, client_for, idle_stop, field):
    fund(renter, 100_000)
    answer = order(client_for(renter), idle_stop=idle_stop)

    assert answer.status_code == 400
    assert list(answer.json()["errors"]) == [field]
    assert not Instance.objects.exists()


@pytest.mark.parametrize(
    "stop_at",
    [timedelta(minutes=-1), timedelta(days=366)],
)
def test_an_orders_stop_at_is_validated(renter, client_for, stop_at):
    fund(renter, 100_000)
    when = (timezone.now() + stop_at).isoformat()

    answer = order(client_for(renter), stop_at=when)

    assert answer.status_code == 400
    assert (answer.json()["code"], answer.json()["detail"][:8]) == ("invalid_stop_at", "stop_at:")
    assert not Instance.objects.exists()


def test_stop_at_and_stop_after_hours_together_are_refused(renter, client_for):
    fund(renter, 100_000)
    when = (timezone.now() + timedelta(hours=5)).isoformat()

    answer = order(client_for(renter), stop_at=when, stop_after_hours=2)

    assert answer.status_code == 400
    assert list(answer.json()["errors"]) == ["stop_at"]


def test_patch_sets_and_clears_both(renter, client_for):
    instance = make_instance(renter)
    client = client_for(renter)
    when = timezone.now() + timedelta(hours=6)

    answer = client.patch(
        f"/api/v1/instances/{instance.id}",
        {"idle_stop": {"util_pct": 10, "minutes": 45}, "stop_at": when.isoformat()},
        format="json",
    )

    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["idle_stop"] == {"util_pct": 10, "minutes": 45}
    instance.refresh_from_db()
    assert instance.stop_policy.stop_at == when
    assert "Scheduled stop at" in messages(instance)[-1]

    answer = client.patch(
        f"/api/v1/instances/{instance.id}", {"idle_stop": None, "stop_at": None}, format="json"
    )
    assert (answer.json()["idle_stop"], answer.json()["stop_at"]) == (None, None)


def test_patch_refuses_bad_values_and_changes_nothing(renter, client_for):
    instance = make_instance(renter)
    client = client_for(renter)

    bad = client.patch(
        f"/api/v1/instances/{instance.id}",
        {"idle_stop": {"util_pct": 5, "minutes": 2}},
        format="json",
    )
    past = client.patch(
        f"/api/v1/instances/{instance.id}",
        {"stop_at": (timezone.now() - timedelta(hours=1)).isoformat()},
        format="json",
    )

    assert (bad.status_code, list(bad.json()["errors"])) == (400, ["idle_stop.minutes"])
    assert (past.status_code, past.json()["code"]) == (400, "invalid_stop_at")
    instance.refresh_from_db()
    assert (instance.stop_policy.idle_stop_minutes, instance.stop_policy.stop_at) == (30, None)


def test_another_tenants_instance_is_404(renter, client_for):
    instance = make_instance(renter)
    other = client_for(make_user())

    patched = other.patch(f"/api/v1/instances/{instance.id}", {"idle_stop": None}, format="json")
    kept = other.post(f"/api/v1/instances/{instance.id}/keep-running")

    assert (patched.status_code, kept.status_code) == (404, 404)
    instance.refresh_from_db()
    assert instance.stop_policy.idle_stop_minutes == 30


def test_patch_refuses_a_terminated_instance(renter, client_for):
    instance = make_instance(renter)
    Instance.objects.filter(pk=instance.pk).update(status="terminated")

    answer = client_for(renter).patch(
        f"/api/v1/instances/{instance.id}", {"idle_stop": None}, format="json"
    )

    assert (answer.status_code, answer.json()["code"]) == (409, "wrong_state")


# --- money saved ------------------------------------------------------------------------------


def _stopped_at(instance: Instance, at: Any, price: int = 1200) -> None:
    AutoStop.objects.create(
        instance=instance,
        tenant_id=instance.tenant_id,
        kind="idle",
        at=at,
        price_per_hour_fen=price,
    )


def test_saved_money_runs_until_the_next_start(renter):
    instance = make_instance(renter)
    now = timezone.localtime(timezone.now()).replace(day=20, hour=12, minute=0, second=0)
    stop = now - timedelta(hours=5)
    _stopped_at(instance, stop)
    InstanceEvent.objects.create(
        instance=instance, status="queued", message="Start requested.", at=stop + timedelta(hours=2)
    )

    saved = auto_stop_savings(renter.tenant_id, now=now)

    assert (saved.saved_fen, saved.stops) == (2400, 1)


def test_saved_money_is_capped_at_a_day_and_counts_whole_minutes(renter):
    instance = make_instance(renter)
    now = timezone.localtime(timezone.now()).replace(day=28, hour=12, minute=0, second=0)
    _stopped_at(instance, now - timedelta(days=3))  # never started again: 24 hours
    _stopped_at(instance, now - timedelta(minutes=90, seconds=59), price=1000)  # 90 minutes
    _stopped_at(instance, now - timedelta(days=40))  # last month: not counted

    saved = auto_stop_savings(renter.tenant_id, now=now)

    assert (saved.saved_fen, saved.stops) == (1200 * 24 + 1500, 2)


def test_the_api_shows_this_accounts_savings(renter, client_for):
    from tests.instances.test_autostop_console import recent_stop

    recent_stop(make_instance(renter), price=12_000)
    recent_stop(make_instance(make_user()), price=60_000)  # another account's

    body = client_for(renter).get("/api/v1/instances/auto-stop-savings").json()

    assert (body["saved_fen"], body["stops"]) == (200, 1)


def test_an_idle_stop_of_a_monthly_rental_in_its_month_saves_nothing(renter):
    offering = Offering.objects.get(gpu_model_id="h100-80g", kind="bare_metal")
    assert offering.price_per_month_fen is not None
    fund(renter, offering.price_per_month_fen * 2, key="month")
    instance, _ = instance_order(
        user=renter, offering_id=offering.id, image_id=IMAGE, billing="monthly"
    )
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    started = since_running(instance, 40)
    report(instance, start=started, end=timezone.now(), util=0, step=60)
    now = timezone.now()
    idle_run(now=now)
    report(instance, start=now + timedelta(seconds=1), end=now + timedelta(minutes=10), step=60)

    assert idle_run(now=now + timedelta(minutes=10)).stopped == [instance.id]
    assert AutoStop.objects.get(instance=instance).price_per_hour_fen == 0


def test_a_clusters_ranks_are_left_out(renter, client_for):
    cluster = make_cluster(renter, node_count=2)
    rank = Instance.objects.get(cluster_rank__cluster=cluster, cluster_rank__index=0)
    assert rank.status == "provisioning"
    started = timezone.now() - timedelta(minutes=60)
    Instance.objects.filter(pk=rank.pk).update(status="running", running_since=started)
    StopPolicy.objects.filter(instance=rank).update(idle_stop_util_pct=5, idle_stop_minutes=30)
    report(rank, start=started, end=timezone.now(), util=0, step=60)

    assert idle_run(now=timezone.now()).warned == []
    answer = client_for(renter).patch(
        f"/api/v1/instances/{rank.id}", {"stop_after_hours": 1}, format="json"
    )
    assert (answer.status_code, answer.json()["code"]) == (409, "cluster_rank")
