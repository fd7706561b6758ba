"""The console's side of the automatic stops: the rent form's idle auto-stop and stop-after
hours, the instance page's Automatic stop card, the idle banner with Keep running (on the
instance page and the dashboard), the Settings page, and the dashboard's savings line."""

import re
from datetime import timedelta

from django.utils import timezone

from instances.models import AutoStop, Instance, InstanceEvent, StopPolicy
from starverse.accounts.services import user_settings_update
from tests.factories import fund, make_instance, make_user


def _token(page) -> str:
    match = re.search(r'name="token" value="([^"]+)"', page.content.decode())
    assert match, "the rent form has no token"
    return match.group(1)


def _renter(client):
    user = make_user()
    fund(user, 100_000)
    client.force_login(user)
    return user


def _rent(client, catalog, **extra):
    page = client.get("/console/rent/")
    data = {
        "offering": catalog["h100x1"].id,
        "image": catalog["image"].id,
        "billing": "hourly",
        "token": _token(page),
        **extra,
    }
    answer = client.post("/console/rent/", data)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    return Instance.objects.get(pk=answer["Location"].split("/")[-2])


def test_the_rent_form_offers_the_users_idle_defaults(catalog, client):
    user = _renter(client)
    user_settings_update(user=user, idle_stop_minutes=45)

    html = client.get("/console/rent/").content.decode()

    assert re.search(r'name="idle_stop" value="on" checked', html)
    assert 'name="idle_minutes" min="10" max="1440" value="45"' in html


def test_the_rent_form_orders_with_idle_stop_and_stop_after(catalog, client):
    _renter(client)

    instance = _rent(
        client, catalog, idle_stop="on", idle_util_pct="8", idle_minutes="20", stop_after_hours="4"
    )

    assert (instance.stop_policy.idle_stop_util_pct, instance.stop_policy.idle_stop_minutes) == (
        8,
        20,
    )
    assert instance.stop_policy.stop_at is not None
    assert abs(instance.stop_policy.stop_at - (timezone.now() + timedelta(hours=4))) < timedelta(
        minutes=1
    )


def test_the_rent_form_without_the_tick_orders_no_idle_stop(catalog, client):
    _renter(client)

    instance = _rent(client, catalog)

    assert (
        instance.stop_policy.idle_stop_util_pct,
        instance.stop_policy.idle_stop_minutes,
        instance.stop_policy.stop_at,
    ) == (
        None,
        None,
        None,
    )


def test_the_rent_form_refuses_a_bad_idle_time(catalog, client):
    _renter(client)
    page = client.get("/console/rent/")

    answer = client.post(
        "/console/rent/",
        {
            "offering": catalog["h100x1"].id,
            "image": catalog["image"].id,
            "billing": "hourly",
            "token": _token(page),
            "idle_stop": "on",
            "idle_minutes": "5",
        },
    )

    assert answer.status_code == 400
    assert "the idle time is from 10 to 1440 minutes" in answer.content.decode()
    assert not Instance.objects.exists()


def test_the_instance_page_changes_both_stops(catalog, client):
    user = _renter(client)
    instance = make_instance(user)
    when = timezone.localtime(timezone.now() + timedelta(hours=3)).replace(second=0, microsecond=0)

    answer = client.post(
        f"/console/instances/{instance.id}/auto-stop/",
        {
            "idle_stop": "on",
            "idle_util_pct": "12",
            "idle_minutes": "90",
            "stop_at": when.strftime("%Y-%m-%dT%H:%M"),
        },
    )

    assert answer.status_code == 302
    instance.refresh_from_db()
    assert (instance.stop_policy.idle_stop_util_pct, instance.stop_policy.idle_stop_minutes) == (
        12,
        90,
    )
    assert instance.stop_policy.stop_at == when
    page = client.get(f"/console/instances/{instance.id}/").content.decode()
    assert 'name="idle_minutes" min="10" max="1440" value="90"' in page

    client.post(f"/console/instances/{instance.id}/auto-stop/", {"stop_at": ""})
    instance.refresh_from_db()
    assert (instance.stop_policy.idle_stop_minutes, instance.stop_policy.stop_at) == (None, None)


def test_the_instance_page_refuses_bad_values_and_changes_nothing(catalog, client):
    user = _renter(client)
    instance = make_instance(user)

    client.post(
        f"/console/instances/{instance.id}/auto-stop/",
        {"idle_stop": "on", "idle_util_pct": "0", "idle_minutes": "30"},
    )
    page = client.get(f"/console/instances/{instance.id}/").content.decode()

    assert "idle_stop.util_pct: must be a whole number from 1 to 100." in page
    instance.refresh_from_db()
    assert (instance.stop_policy.idle_stop_util_pct, instance.stop_policy.idle_stop_minutes) == (
        5,
        30,
    )


def test_a_stop_time_no_calendar_holds_is_refused_with_a_message(catalog, client):
    user = _renter(client)
    instance = make_instance(user)

    for when in ("2026-12-01T08:00+25:00", "9999-12-31T23:59"):
        answer = client.post(f"/console/instances/{instance.id}/auto-stop/", {"stop_at": when})
        assert answer.status_code == 302
        page = client.get(f"/console/instances/{instance.id}/").content.decode()
        assert "stop_at: enter a date and time." in page
    instance.refresh_from_db()
    assert instance.stop_policy.stop_at is None


def _warned(instance: Instance) -> None:
    due = timezone.now() + timedelta(minutes=10)
    Instance.objects.filter(pk=instance.pk).update(status="running")
    StopPolicy.objects.filter(instance=instance).update(
        idle_warned_at=timezone.now(), idle_stop_due_at=due
    )


def test_the_banner_and_keep_running_on_the_instance_page_and_the_dashboard(catalog, client):
    user = _renter(client)
    instance = make_instance(user)
    _warned(instance)

    page = client.get(f"/console/instances/{instance.id}/").content.decode()
    dashboard = client.get("/console/").content.decode()

    assert "This instance is idle." in page and "Keep running" in page
    assert "“job” is idle." in dashboard
    answer = client.post(f"/console/instances/{instance.id}/keep-running/", {"next": "/console/"})
    assert answer["Location"] == "/console/"
    instance.refresh_from_db()
    assert instance.stop_policy.idle_stop_due_at is None
    assert "is idle." not in client.get("/console/").content.decode()


def test_keep_running_of_another_users_instance_is_not_found(catalog, client):
    instance = make_instance(make_user())
    _warned(instance)
    _renter(client)

    answer = client.post(f"/console/instances/{instance.id}/keep-running/")

    assert answer.status_code == 404
    instance.refresh_from_db()
    assert instance.stop_policy.idle_stop_due_at is not None


def test_the_settings_page_saves_the_defaults(client, db):
    user = _renter(client)

    assert client.get("/accounts/settings/").status_code == 200
    answer = client.post(
        "/accounts/settings/",
        {"idle_stop_util_pct": "3", "idle_stop_minutes": "60", "idle_warn_minutes": "5"},
    )

    assert answer.status_code == 302
    settings = user.settings
    settings.refresh_from_db()
    assert (
        settings.idle_stop_enabled,
        settings.idle_stop_util_pct,
        settings.idle_stop_minutes,
        settings.idle_warn_minutes,
    ) == (False, 3, 60, 5)
    refused = client.post(
        "/accounts/settings/",
        {"idle_stop_util_pct": "3", "idle_stop_minutes": "5", "idle_warn_minutes": "5"},
    )
    assert refused.status_code == 400
    settings.refresh_from_db()
    assert settings.idle_stop_minutes == 60


def recent_stop(instance: Instance, price: int) -> None:
    """An automatic stop this month that saved one minute of `price` per hour: stopped at most
    two hours ago, started again a minute later."""
    now = timezone.now()
    month = timezone.localtime(now).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    at = max(now - timedelta(hours=2), month)
    AutoStop.objects.create(
        instance=instance,
        tenant_id=instance.tenant_id,
        kind="idle",
        at=at,
        price_per_hour_fen=price,
    )
    InstanceEvent.objects.create(
        instance=instance, status="queued", message="Start requested.", at=at + timedelta(minutes=1)
    )


def test_the_dashboard_shows_what_auto_stop_saved_this_month(catalog, client):
    user = _renter(client)
    recent_stop(make_instance(user), price=12_000)
    recent_stop(make_instance(make_user()), price=60_000)  # another account's

    html = client.get("/console/").content.decode()

    assert "Auto-stop saved you ¥2.00 this month." in html
