"""Days and times that people type (query strings, forms), read one way for every caller.

Python's calendar ends at 9999-12-31 and a fixed offset must stay under 24 hours; what the
callers then do (the day after the last one asked, a zone's midnight, a month's end) must not
leave it. So a day outside FIRST_DAY..LAST_DAY, a time whose offset is a day or more, or a
well-formed but impossible value is refused like any other bad input (a 400 that names the
field), never an OverflowError or ValueError that surfaces as a 500. The range leaves a day
either side of the calendar's ends for a zone offset and a "next day", and holds every day the
platform can have a record of."""

from datetime import date, datetime

from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

FIRST_DAY = date(1900, 1, 1)
LAST_DAY = date(9998, 12, 31)


def day_in_range(day: date) -> bool:
    return FIRST_DAY <= day <= LAST_DAY


def validate_day(value: date) -> None:
    """A validator for form and serializer date fields: the day is one the callers can count
    from (a day after it, its midnight in any zone)."""
    if not day_in_range(value):
        message = _("Enter a date from %(first)s to %(last)s.") % {
            "first": FIRST_DAY.isoformat(),
            "last": LAST_DAY.isoformat(),
        }
        raise ValidationError(message, "date_out_of_range")


def parse_moment(text: str) -> datetime | None:
    """An ISO 8601 date (its midnight) or date and time; without an offset it is read in the
    current time zone. None when it is not one, is impossible (an offset of 24 hours or more,
    a 30 February) or lies outside FIRST_DAY..LAST_DAY."""
    try:
        parsed = parse_datetime(text.strip())
    except ValueError:
        return None
    if parsed is None or not day_in_range(parsed.date()):
        return None
    return timezone.make_aware(parsed) if timezone.is_naive(parsed) else parsed
