"""Usage read from the ledger: what each instance, inference endpoint and volume cost over a
range of days, grouped by instance, by day or by member, for the usage API, the console and the
monthly statements.

Usage is every `usage` posting (GPU minutes of instances and of endpoint replicas, by the hour,
monthly rentals, storage days) less the operators' reversals of them. One aggregate query per
report groups the postings by (bucket, resource); the instances, endpoints and volumes named are
then looked up once, for their labels, GPU counts and who ordered them. They belong to apps
above billing, which name their own: each registers a namer (resource_namer_register, from its
AppConfig.ready), so billing imports none of them."""

import functools
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db.models import (
    Case,
    CharField,
    F,
    IntegerField,
    Max,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import StrIndex, Substr, TruncDate
from django.utils.translation import gettext as _

from billing.choices import TransactionKind
from billing.models import LedgerTransaction
from starverse.core.db import CompiledQuery, compile_once
from starverse.core.money import format_fen
from starverse.core.spreadsheets import csv_writer

GROUPINGS = ("instance", "day", "member")
MAX_RANGE_DAYS = 366
# The key of an account-wide charge that no instance or volume of the tenant explains.
ACCOUNT_KEY = "account"


@dataclass
class UsageRow:
    key: str
    label: str
    minutes: int = 0
    gpu_minutes: int = 0
    amount_fen: int = 0

    @property
    def gpu_hours(self) -> float:
        return round(self.gpu_minutes / 60, 2)

    def as_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "label": self.label,
            "minutes": self.minutes,
            "gpu_hours": self.gpu_hours,
            "amount_fen": self.amount_fen,
        }


@dataclass
class UsageReport:
    start: date
    end: date  # inclusive
    group_by: str
    rows: list[UsageRow] = field(default_factory=list)

    @property
    def totals(self) -> UsageRow:
        total = UsageRow(key="", label=_("Total"))
        for row in self.rows:
            total.minutes += row.minutes
            total.gpu_minutes += row.gpu_minutes
            total.amount_fen += row.amount_fen
        return total


def local_midnight(day: date) -> datetime:
    """The start of a calendar day in TIME_ZONE (days and months are the platform's)."""
    return datetime.combine(day, time.min, tzinfo=ZoneInfo(settings.TIME_ZONE))


def _usage_postings(tenant_id: str, start: datetime, end: datetime) -> QuerySet[LedgerTransaction]:
    """The tenant's usage postings and reversals of them in [start, end), each with the
    resource it charged (`resource`: an instance or endpoint id, a volume id or "") and the
    minutes it stands for (`minute`: the GPU minutes of an instance or of one endpoint replica
    it paid, negative for its reversal; 0 for storage and rentals)."""
    reversal = Q(kind=TransactionKind.REVERSAL)
    postings = LedgerTransaction.objects.filter(
        wallet__tenant_id=tenant_id, created_at__gte=start, created_at__lt=end
    ).filter(Q(kind=TransactionKind.USAGE) | (reversal & Q(reverses__kind=TransactionKind.USAGE)))
    postings = postings.annotate(
        src_instance=Case(
            When(reversal, then=F("reverses__instance_id")), default=F("instance_id")
        ),
        src_key=Case(
            When(reversal, then=F("reverses__idempotency_key")), default=F("idempotency_key")
        ),
        src_minutes=Case(When(reversal, then=F("reverses__minutes")), default=F("minutes")),
    )
    # a posting's minutes: its own count (the meter's hourly postings), or one for a
    # per-minute posting of an instance or a replica made before them (minutes 0)
    per_minute = Q(src_key__startswith="usage:") | Q(src_key__startswith="endpoint:")
    postings = postings.alias(
        src_minutes_or_one=Case(
            When(Q(src_minutes=0) & per_minute, then=Value(1)),
            default=F("src_minutes"),
            output_field=IntegerField(),
        )
    )
    # Storage keys are `storage:{volume}:{day}` and `storage-grow:{volume}:{day}:{size}`.
    postings = postings.annotate(
        key_rest=Substr("src_key", StrIndex("src_key", Value(":")) + 1),
    ).annotate(
        resource=Case(
            When(~Q(src_instance=""), then=F("src_instance")),
            When(
                src_key__startswith="storage",
                then=Substr("key_rest", 1, StrIndex("key_rest", Value(":")) - 1),
            ),
            default=Value(""),
            output_field=CharField(),
        ),
        minute=Case(
            When(reversal, then=-F("src_minutes_or_one")),
            default=F("src_minutes_or_one"),
            output_field=IntegerField(),
        ),
    )
    return postings


def _bucket(group_by: str) -> TruncDate | Value:
    if group_by == "day":
        return TruncDate("created_at", tzinfo=ZoneInfo(settings.TIME_ZONE))
    return Value("", output_field=CharField())


@dataclass(frozen=True)
class Resource:
    label: str
    gpu_count: int = 0
    member_key: str = ACCOUNT_KEY
    member_label: str = ""


ResourceNamer = Callable[[set[str]], dict[str, Resource]]
_NAMERS: dict[str, ResourceNamer] = {}


def resource_namer_register(kind: str, namer: ResourceNamer) -> None:
    """An app above billing names the resources its charges are for (`namer` is given the ids
    among a report's and returns those that are its own): instances, endpoints, disks. Called
    from the app's AppConfig.ready; registering a kind again replaces its namer."""
    _NAMERS[kind] = namer


def resources_named(ids: set[str]) -> dict[str, Resource]:
    """The instances, endpoints and volumes among `ids`: their labels, GPU counts (of one
    replica, for an endpoint: its minutes are replica-minutes) and members, as the apps that
    own them name them.

    The member of an instance or an endpoint is the user who ordered it (`created_by`);
    volumes and account-wide charges belong to the account. Grouping by member reads only
    this."""
    found: dict[str, Resource] = {}
    for kind in sorted(_NAMERS):
        found.update(_NAMERS[kind](ids - found.keys()))
    return found


def _grouped(tenant_id: str, start: datetime, end: datetime, group_by: str) -> QuerySet[Any]:
    """The postings summed by (bucket, resource)."""
    return (
        _usage_postings(tenant_id, start, end)
        .annotate(bucket=_bucket(group_by))
        .values("bucket", "resource")
        .annotate(
            minutes=Sum("minute"),
            spent=Sum(-F("amount_fen")),
            description=Max("description"),
        )
        .order_by()
    )


# Stand-ins no real report passes, where compile_once finds the parameters of a call.
_SENTINELS: dict[str, Any] = {
    "tenant": "tnt_usage_report_sentinel",
    "start": datetime(1001, 1, 1, tzinfo=UTC),
    "end": datetime(1002, 1, 1, tzinfo=UTC),
}


@functools.cache
def _grouped_statement(group_by: str, time_zone: str) -> CompiledQuery:
    """_grouped's SQL, built once a process for each grouping (and TIME_ZONE, which the day
    grouping names in it): the billing page shows this report at every visit, and building
    its query through the ORM cost more than running it."""
    return compile_once(
        _grouped(_SENTINELS["tenant"], _SENTINELS["start"], _SENTINELS["end"], group_by),
        _SENTINELS,
    )


def usage_report(*, tenant_id: str, start: date, end: date, group_by: str) -> UsageReport:
    """The tenant's usage on the days start..end (inclusive, in TIME_ZONE), grouped."""
    if group_by not in GROUPINGS:
        raise ValueError(f"group_by must be one of {GROUPINGS}, not {group_by!r}")
    report = UsageReport(start=start, end=end, group_by=group_by)
    statement = _grouped_statement(group_by, settings.TIME_ZONE)
    aggregated: list[_Grouped] = [
        {
            "bucket": row["bucket"],
            "resource": row["resource"],
            "minutes": int(row["minutes"]),  # PostgreSQL's sums are numeric
            "spent": int(row["spent"]),
            "description": row["description"],
        }
        for row in statement.rows(
            tenant=tenant_id,
            start=local_midnight(start),
            end=local_midnight(end + timedelta(days=1)),
        )
    ]
    named = resources_named({row["resource"] for row in aggregated if row["resource"]})
    rows: dict[str, UsageRow] = {}
    for item in aggregated:
        resource = named.get(item["resource"])
        key, label = _row_key(group_by, item, resource)
        row = rows.setdefault(key, UsageRow(key=key, label=label))
        row.minutes += item["minutes"]
        row.gpu_minutes += item["minutes"] * (resource.gpu_count if resource else 0)
        row.amount_fen += item["spent"]
    ordered = sorted(rows.values(), key=lambda r: (-r.amount_fen, r.key))
    report.rows = sorted(ordered, key=lambda r: r.key) if group_by == "day" else ordered
    return report


class _Grouped(TypedDict):
    """A row of usage_report's grouped postings: one bucket and resource."""

    bucket: Any  # a date when grouped by day, else ""
    resource: str
    minutes: int
    spent: int
    description: str


def _row_key(group_by: str, item: _Grouped, resource: Resource | None) -> tuple[str, str]:
    if group_by == "day":
        return item["bucket"].isoformat(), item["bucket"].isoformat()
    if group_by == "member":
        if resource is None or not resource.member_label:
            return ACCOUNT_KEY, _("Storage and account-wide charges")
        return resource.member_key, resource.member_label
    if resource is not None:
        return item["resource"], resource.label
    if item["resource"]:  # a volume deleted since, or the shared NAS
        return item["resource"], f"{_(item['description'])} ({item['resource']})"
    return ACCOUNT_KEY, _(item["description"])


def usage_csv(report: UsageReport) -> bytes:
    """The report as CSV, UTF-8 with a byte-order mark (Excel in China reads it so); amounts
    in yuan as plain numbers."""
    out = io.StringIO()
    writer = csv_writer(out)
    writer.writerow(["key", "label", "minutes", "gpu_hours", "amount_cny"])
    total = report.totals
    for row in [*report.rows, total]:
        amount = format_fen(row.amount_fen, symbol=False).replace(",", "")
        writer.writerow([row.key, row.label, row.minutes, f"{row.gpu_hours:.2f}", amount])
    return out.getvalue().encode("utf-8-sig")
