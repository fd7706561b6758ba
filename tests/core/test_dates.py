"""Days and times people type, read one way (starverse.core.dates): what the calendar cannot
carry through the callers' arithmetic is refused as bad input, never raised."""

from datetime import UTC, date, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone as django_timezone

from starverse.core.dates import FIRST_DAY, LAST_DAY, parse_moment, validate_day


def test_a_date_or_a_time_is_read_in_the_current_zone_unless_it_names_one(settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    with django_timezone.override("Asia/Shanghai"):
        day = parse_moment("2026-12-01")
        local = parse_moment(" 2026-12-01T08:00:00 ")
    zoned = parse_moment("2026-12-01T08:00:00-05:00")

    assert day is not None and day.utcoffset() == timedelta(hours=8)
    assert day.replace(tzinfo=None) == datetime(2026, 12, 1)
    assert local is not None and local.astimezone(UTC) == datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
    assert zoned == datetime(2026, 12, 1, 13, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "yesterday",
        "2026-02-30",
        "2026-12-01T08:00:00+25:00",
        "2026-12-01T08:00:00+24:00",
        "2026-12-01T08:00:00-24:00",
        "9999-12-31",
        "9999-12-31T23:00:00+08:00",
        "0001-01-01T00:00:00+14:00",
        "1899-12-31",
    ],
)
def test_what_no_caller_can_count_from_is_none(text):
    assert parse_moment(text) is None


def test_the_days_at_either_end_survive_a_zone_and_a_day_either_side():
    near_a_day = timedelta(hours=23, minutes=59)
    for day in (FIRST_DAY, LAST_DAY):
        validate_day(day)
        midnight = datetime.combine(day, datetime.min.time())
        for sign, offset in ((1, "+23:59"), (-1, "-23:59")):
            start = parse_moment(f"{day.isoformat()}T00:00:00{offset}")
            assert start is not None
            assert start.astimezone(UTC).replace(tzinfo=None) == midnight - sign * near_a_day
            after, before = start + timedelta(days=1), start - timedelta(days=1)
            assert after.astimezone(UTC) - before.astimezone(UTC) == timedelta(days=2)


def test_a_day_outside_the_range_is_refused_with_the_range():
    for day in (FIRST_DAY - timedelta(days=1), LAST_DAY + timedelta(days=1), date.max):
        with pytest.raises(ValidationError) as refused:
            validate_day(day)
        assert refused.value.messages == ["Enter a date from 1900-01-01 to 9998-12-31."]
        assert refused.value.code == "date_out_of_range"
