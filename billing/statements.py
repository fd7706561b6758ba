"""Monthly statements (对账单): one per tenant per closed calendar month (TIME_ZONE), with the
opening and closing balances summed from the ledger, every ledger line of the month and usage
by instance and volume, stored as a PDF and a CSV (billing.documents renders them).

A statement is made once: the unique (tenant, month) decides between a beat run and an
on-demand one, and the loser answers the winner's row. The beat task on the 1st makes last
month's for every tenant whose wallet moved in it or holds a balance at its end."""

import io
import logging
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import IO

from django.conf import settings
from django.core.cache import cache
from django.core.files.base import ContentFile
from django.db import IntegrityError, transaction
from django.db.models import Q, Sum
from django.db.models.fields.files import FieldFile
from django.utils import timezone
from django.utils.translation import gettext as _

from billing.choices import Account
from billing.documents import statement_csv, statement_pdf
from billing.models import LedgerEntry, LedgerTransaction, Statement, Wallet
from billing.usage import UsageReport, local_midnight, usage_report
from starverse.core.dates import day_in_range
from starverse.core.errors import InvalidInput, NotFound

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Balances:
    cash_fen: int
    promo_fen: int
    arrears_fen: int

    @property
    def total_fen(self) -> int:
        return self.cash_fen + self.promo_fen - self.arrears_fen


@dataclass
class StatementData:
    """What a statement shows, before it is rendered."""

    tenant_id: str
    month: date
    opening: Balances
    closing: Balances
    lines: list[LedgerTransaction]
    usage: UsageReport
    as_of: datetime | None = None  # the current month so far: up to this moment, not final

    @property
    def credits_fen(self) -> int:
        return sum(t.amount_fen for t in self.lines if t.amount_fen > 0)

    @property
    def debits_fen(self) -> int:
        return sum(t.amount_fen for t in self.lines if t.amount_fen < 0)


def month_start(day: date) -> date:
    return day.replace(day=1)


def next_month(month: date) -> date:
    return (month.replace(day=28) + timedelta(days=4)).replace(day=1)


def parse_month(text: str) -> date:
    """'2026-11' → date(2026, 11, 1); anything else is a 400 naming `month`."""
    try:
        month = datetime.strptime(text, "%Y-%m").date()
    except ValueError:
        month = None
    if month is None or not day_in_range(month):
        raise InvalidInput(
            _("month: %(value)s is not a month such as 2026-11.") % {"value": text[:20]},
            code="invalid_month",
        )
    return month


def current_month() -> date:
    return month_start(timezone.localdate())


def balances_at(wallet_id: str, moment: datetime) -> Balances:
    """The wallet's balances just before `moment`: the sum of its ledger entries until then
    (arrears entries are what it owes, negated)."""
    sums = LedgerEntry.objects.filter(
        wallet_id=wallet_id, transaction__created_at__lt=moment
    ).aggregate(
        cash=Sum("amount_fen", filter=Q(account=Account.CASH), default=0),
        promo=Sum("amount_fen", filter=Q(account=Account.PROMO), default=0),
        arrears=Sum("amount_fen", filter=Q(account=Account.ARREARS), default=0),
    )
    return Balances(int(sums["cash"]), int(sums["promo"]), -int(sums["arrears"]))


def statement_data(*, tenant_id: str, month: date, until: datetime | None = None) -> StatementData:
    """A month's figures; `until` cuts the current month at that moment."""
    wallet = Wallet.objects.get(tenant_id=tenant_id)
    start, end = local_midnight(month), until or local_midnight(next_month(month))
    lines = list(
        LedgerTransaction.objects.filter(wallet=wallet, created_at__gte=start, created_at__lt=end)
        .order_by("seq")
        .only(
            "id",
            "seq",
            "kind",
            "description",
            "instance_id",
            "amount_fen",
            "cash_after_fen",
            "promo_after_fen",
            "arrears_after_fen",
            "created_at",
        )
    )
    return StatementData(
        tenant_id=tenant_id,
        month=month,
        opening=balances_at(wallet.id, start),
        closing=balances_at(wallet.id, end),
        lines=lines,
        usage=usage_report(
            tenant_id=tenant_id,
            start=month,
            end=timezone.localdate(until) if until else next_month(month) - timedelta(days=1),
            group_by="instance",
        ),
        as_of=until,
    )


def _statement_row(data: StatementData) -> Statement:
    """The statement's row for `data`, not saved."""
    return Statement(
        tenant_id=data.tenant_id,
        month=data.month,
        opening_fen=data.opening.total_fen,
        closing_fen=data.closing.total_fen,
        opening_cash_fen=data.opening.cash_fen,
        opening_promo_fen=data.opening.promo_fen,
        closing_cash_fen=data.closing.cash_fen,
        closing_promo_fen=data.closing.promo_fen,
        credits_fen=data.credits_fen,
        debits_fen=data.debits_fen,
        lines=len(data.lines),
        generated_at=data.as_of or timezone.now(),
    )


def _check_closed(month: date) -> None:
    if month >= current_month():
        raise InvalidInput(
            _("month: %(month)s has not begun yet.") % {"month": f"{month:%Y-%m}"},
            code="month_not_closed",
        )


def statement_generate(*, tenant_id: str, month: date) -> Statement:
    """The tenant's statement of a closed month: the one made before, or made now."""
    month = month_start(month)
    _check_closed(month)
    found = Statement.objects.filter(tenant_id=tenant_id, month=month).first()
    if found is not None:
        return found
    data = statement_data(tenant_id=tenant_id, month=month)
    statement = _statement_row(data)
    name = f"{tenant_id}-{month:%Y-%m}"
    statement.pdf.save(f"{name}.pdf", ContentFile(statement_pdf(data)), save=False)
    statement.csv.save(f"{name}.csv", ContentFile(statement_csv(data)), save=False)
    try:
        with transaction.atomic():
            statement.save(force_insert=True)
    except IntegrityError:
        # made meanwhile by another run: keep that one, drop the files written for this one
        statement.pdf.delete(save=False)
        statement.csv.delete(save=False)
        return Statement.objects.get(tenant_id=tenant_id, month=month)
    logger.info(
        "statement.generated statement=%s tenant=%s month=%s lines=%d",
        statement.id,
        tenant_id,
        f"{month:%Y-%m}",
        statement.lines,
    )
    return statement


def statement_for(*, tenant_id: str, month: date) -> Statement:
    """A month's statement for the console and API: a closed month's is made on demand when
    missing, for months from the account's opening on (earlier ones are 404); the current
    month's is the month so far (`month_to_date`)."""
    if month == current_month():
        return month_to_date(tenant_id=tenant_id)
    _check_closed(month)
    opened = Wallet.objects.values_list("created_at", flat=True).get(tenant_id=tenant_id)
    if month < month_start(timezone.localdate(opened)):
        raise NotFound(_("No statement: the account did not exist in that month."))
    return statement_generate(tenant_id=tenant_id, month=month)


def month_to_date(*, tenant_id: str, now: datetime | None = None) -> Statement:
    """The current month up to now, as a statement that is not final: made on each request
    and never stored (its figures change every minute); `as_of` says when it was cut."""
    data = statement_data(tenant_id=tenant_id, month=current_month(), until=now or timezone.now())
    statement = _statement_row(data)
    statement.as_of = data.as_of
    return statement


# The files a statement comes as, and their media types.
STATEMENT_FORMATS = {"pdf": "application/pdf", "csv": "text/csv; charset=utf-8"}


def statement_content(*, tenant_id: str, month: date, fmt: str) -> IO[bytes] | None:
    """A month's statement as PDF or CSV to send: a closed month's stored file (made on first
    request), or the month so far drawn now; None when a stored file is missing."""
    if month != current_month():
        return stored_file(getattr(statement_for(tenant_id=tenant_id, month=month), fmt))
    # a busy month's PDF takes seconds to draw (tens of thousands of lines): the files of the
    # month so far are kept a few minutes, as of when they were drawn (they say so), and a
    # kept one reads nothing of the ledger
    key = f"statement-so-far:{tenant_id}:{fmt}"
    drawn = cache.get(key)
    if drawn is None:
        data = statement_data(tenant_id=tenant_id, month=month, until=timezone.now())
        drawn = (statement_pdf if fmt == "pdf" else statement_csv)(data)
        cache.set(key, drawn, settings.STATEMENT_SO_FAR_CACHE_S)
    return io.BytesIO(drawn)


def stored_file(field: FieldFile) -> IO[bytes] | None:
    """A FileField's file opened through its storage, None when there is none."""
    return field.open("rb") if field else None


def tenants_due(month: date) -> list[str]:
    """Tenants whose wallet moved in `month` or holds a non-zero balance (or arrears) at its
    end: one query."""
    start, end = local_midnight(month), local_midnight(next_month(month))
    moved = Q(transactions__created_at__gte=start, transactions__created_at__lt=end)
    held = LedgerEntry.objects.filter(transaction__created_at__lt=end).values("wallet_id")
    nonzero = (
        held.annotate(total=Sum("amount_fen")).exclude(total=0).values_list("wallet_id", flat=True)
    )
    return list(
        Wallet.objects.filter(moved | Q(pk__in=nonzero))
        .values_list("tenant_id", flat=True)
        .distinct()
        .order_by("tenant_id")
    )


def last_month() -> date:
    return month_start(current_month() - timedelta(days=1))


def tenants_without_statement(month: date) -> list[str]:
    """The tenants due for `month` whose statement is not made yet."""
    made = set(Statement.objects.filter(month=month).values_list("tenant_id", flat=True))
    return [tenant_id for tenant_id in tenants_due(month) if tenant_id not in made]


def statements_generate_month(*, month: date | None = None) -> int:
    """Make `month`'s statements (default: last month) for every tenant due, one after another
    in this process (the beat's task hands each to a task of its own instead); those made
    before are kept. Returns how many were made now."""
    month = month_start(month) if month else last_month()
    made, failed = 0, 0
    for tenant_id in tenants_without_statement(month):
        try:
            statement_generate(tenant_id=tenant_id, month=month)
        except Exception:
            # one account's failure must not keep the others' statements back; that one is
            # made on its first request, or by running the task again
            failed += 1
            logger.exception("statement.failed tenant=%s month=%s", tenant_id, f"{month:%Y-%m}")
            continue
        made += 1
    logger.info("statement.month month=%s made=%d failed=%d", f"{month:%Y-%m}", made, failed)
    return made
