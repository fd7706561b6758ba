"""GET /api/v1/instances: the hot list read (one query for the page and its count, one for
the disks) answers what the ORM-built detail answers, paginated like every list."""

from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from rest_framework import serializers

from instances.api.serializers import _iso
from instances.models import Instance
from instances.volumes import disk_attach
from tests.factories import make_disk, make_instance, make_user


def test_the_list_matches_the_detail_and_pages(client_for, catalog, cluster):
    user = make_user()
    client = client_for(user)
    made = [make_instance(user, status="stopped") for _ in range(4)]
    made.append(make_instance(user, status="failed", cluster=cluster))
    disk = disk_attach(instance=made[0], disk_id=make_disk(user).id)
    make_instance(make_user())  # another tenant's

    first = client.get("/api/v1/instances?page_size=2").json()
    second = client.get(first["next"]).json()
    third = client.get(second["next"]).json()

    assert first["count"] == 5 and first["previous"] is None
    assert second["previous"].endswith("/api/v1/instances?page_size=2")
    assert third["next"] is None and len(third["results"]) == 1
    listed = {row["id"]: row for page in (first, second, third) for row in page["results"]}
    assert set(listed) == {i.id for i in made}
    for instance in made:
        assert listed[instance.id] == client.get(f"/api/v1/instances/{instance.id}").json()
    assert listed[made[0].id]["disks"] == [disk.id]
    newest_first = [row["id"] for page in (first, second, third) for row in page["results"]]
    assert newest_first == [
        i.id for i in Instance.objects.filter(tenant_id=user.tenant_id).order_by("-created_at")
    ]


def test_the_list_filters_and_refuses_what_it_cannot_answer(client_for, catalog, cluster):
    user = make_user()
    client = client_for(user)
    make_instance(user, status="stopped")
    failed = make_instance(user, status="failed", cluster=cluster)

    only_failed = client.get("/api/v1/instances?status=failed").json()
    assert [row["id"] for row in only_failed["results"]] == [failed.id]
    assert only_failed["count"] == 1
    assert client.get("/api/v1/instances?status=bogus").status_code == 400
    assert client.get("/api/v1/instances?page=9").status_code == 404
    assert client.get("/api/v1/instances?page=zero").status_code == 404
    empty = client_for(make_user()).get("/api/v1/instances").json()
    assert (empty["count"], empty["results"], empty["next"]) == (0, [], None)


# Times the list writes itself (instances.api.serializers._iso), each against what DRF's
# DateTimeField writes: UTC (Z) and other offsets, microseconds or none, naive values, the
# edges of a daylight-saving change, and one too early for some zones (DRF's error for it).
TIMES = [
    datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC),
    datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC),
    datetime(2026, 3, 4, 5, 6, 7, 1, tzinfo=ZoneInfo("Asia/Shanghai")),
    datetime(2026, 3, 8, 6, 59, 59, 999999, tzinfo=UTC),
    datetime(2026, 3, 8, 7, 0, tzinfo=UTC),
    datetime(2026, 11, 1, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York")),
    datetime(2026, 12, 31, 23, 59, 59, tzinfo=dt_timezone(timedelta(hours=-3, minutes=-30))),
    datetime(2026, 3, 4, 5, 6, 7),
    datetime(2026, 3, 4, 5, 6, 7, 500),
    datetime(1, 1, 1, 0, 30, tzinfo=UTC),
]


def _written(write: Any, value: datetime) -> str:
    try:
        return str(write(value))
    except Exception as error:  # the error's kind is what is compared
        return f"error: {type(error).__name__}"


@pytest.mark.parametrize("zone", [None, "UTC", "America/New_York", "Asia/Kathmandu"])
def test_times_are_written_as_drf_writes_them(zone):
    field = serializers.DateTimeField()
    with timezone.override(zone) if zone else nullcontext():
        current = timezone.get_current_timezone()
        ours = [_written(lambda value: _iso(value, current), value) for value in TIMES]
        drf = [_written(field.to_representation, value) for value in TIMES]

    assert ours == drf
    assert _iso(None, current) is None


def test_the_list_writes_times_in_the_current_zone(client_for, catalog):
    user = make_user()
    instance = make_instance(user, status="stopped")
    field = serializers.DateTimeField()

    with timezone.override("UTC"):
        listed = client_for(user).get("/api/v1/instances").json()["results"][0]
        in_utc = field.to_representation(instance.created_at)
    shanghai = client_for(user).get("/api/v1/instances").json()["results"][0]

    assert listed["created_at"] == in_utc and in_utc.endswith("Z")
    assert shanghai["created_at"] == field.to_representation(instance.created_at)
    assert shanghai["created_at"].endswith("+08:00")
