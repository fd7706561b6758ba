import csv
import io
import re
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from bench.statements import statement_of_minutes
from billing import statements, tasks
from billing.choices import TransactionKind
from billing.documents import statement_pdf
from billing.models import LedgerTransaction, Statement, Wallet
from billing.services import (
    Accrual,
    Settlement,
    ledger_post,
    transaction_reverse,
    usage_accrue_many,
    usage_settle_many,
)
from billing.statements import (
    balances_at,
    current_month,
    statement_content,
    statement_for,
    statement_generate,
    statements_generate_month,
    tenants_due,
)
from billing.tasks import generate_statements
from billing.usage import usage_report
from instances.models import Instance
from starverse.core.errors import InvalidInput, NotFound
from tests.factories import (
    _seed_catalog,
    fund,
    make_endpoint,
    make_instance,
    make_operator,
    make_user,
)

TZ = ZoneInfo("Asia/Shanghai")
NOV = date(2026, 11, 1)


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path)


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(TZ)

    def move_to(self, when: datetime) -> None:
        self.now = when


@pytest.fixture
def time_machine(monkeypatch):
    """timezone.now, and the creation times that default to it, at a moment the test sets."""
    clock = Clock()
    monkeypatch.setattr(timezone, "now", lambda: clock.now)
    for model, name in ((LedgerTransaction, "created_at"), (Wallet, "created_at")):
        monkeypatch.setattr(model._meta.get_field(name), "_get_default", lambda: clock.now)
    return clock


def _charge(user, instance_id: str, minute: int, fen: int) -> LedgerTransaction:
    return ledger_post(
        wallet_id=user.tenant.wallet.id,
        key=f"usage:{instance_id}:1:{minute}",
        kind=TransactionKind.USAGE,
        amount_fen=-fen,
        description="GPU usage",
        instance_id=instance_id,
        allow_partial=True,
    )


def test_opening_and_closing_come_from_the_ledger_and_match_the_wallet(db):
    user = make_user()
    fund(user, 20_000)
    wallet = Wallet.objects.get(tenant=user.tenant)
    now = balances_at(wallet.id, datetime.now(TZ) + timedelta(seconds=1))
    wallet.refresh_from_db()
    assert (now.cash_fen, now.promo_fen, now.arrears_fen) == (20_000, 1_000, 0)
    assert now.total_fen == wallet.total_fen
    before = balances_at(wallet.id, datetime(2000, 1, 1, tzinfo=TZ))
    assert before.total_fen == 0


def test_statement_of_last_month_lists_every_line_and_usage(db, time_machine):
    time_machine.move_to(datetime(2026, 11, 10, 12, 0, tzinfo=TZ))
    user = make_user()
    fund(user, 50_000)
    instance = make_instance(user)
    for minute in range(1, 4):
        _charge(user, instance.id, minute, 100)
    time_machine.move_to(datetime(2026, 12, 2, 9, 0, tzinfo=TZ))
    fund(user, 7_000)  # December: not on November's statement

    statement = statement_for(tenant_id=user.tenant_id, month=NOV)

    wallet = user.tenant.wallet
    lines = LedgerTransaction.objects.filter(
        wallet=wallet, created_at__lt=datetime(2026, 12, 1, tzinfo=TZ)
    )
    assert statement.lines == lines.count()
    assert statement.opening_fen == 0
    assert statement.closing_fen == sum(t.amount_fen for t in lines)
    assert (
        statement.closing_fen
        == statement.opening_fen + statement.credits_fen + statement.debits_fen
    )
    assert statement.pdf.read().startswith(b"%PDF-")
    text = statement.csv.read().decode("utf-8")
    assert text.startswith("\ufeff")
    rows = list(csv.reader(io.StringIO(text[1:])))
    ids = {row[-1] for row in rows if row and row[-1].startswith("txn_")}
    assert ids == set(lines.values_list("id", flat=True))
    usage = [row for row in rows if row and row[0].startswith(instance.name)]
    assert usage == [[f"{instance.name} ({instance.id})", "3", "0.05", "3.00"]]
    # asked again: the same statement, not a second one
    assert statement_for(tenant_id=user.tenant_id, month=NOV).pk == statement.pk
    assert Statement.objects.count() == 1


def _read(statement, fmt: str) -> bytes:
    content = statement_content(tenant_id=statement.tenant_id, month=statement.month, fmt=fmt)
    assert content is not None
    return content.read()


def test_the_current_month_is_the_month_so_far_and_never_stored(db, time_machine):
    time_machine.move_to(datetime(2026, 11, 10, 12, 0, tzinfo=TZ))
    user = make_user()  # the trial credit: its first line
    fund(user, 5_000)
    instance = make_instance(user)
    _charge(user, instance.id, 1, 250)
    now = datetime(2026, 11, 10, 12, 30, tzinfo=TZ)
    time_machine.move_to(now)

    so_far = statement_for(tenant_id=user.tenant_id, month=current_month())

    assert (so_far.final, so_far.as_of, so_far.month) == (False, now, NOV)
    assert (so_far.opening_fen, so_far.lines) == (0, 3)
    assert so_far.closing_fen == Wallet.objects.get(tenant=user.tenant).total_fen == 5_750
    text = _read(so_far, "csv").decode("utf-8")
    assert "2026-11-10 12:30:00" in text  # says where it was cut
    assert [r for r in csv.reader(io.StringIO(text[1:])) if r and r[0].startswith(instance.name)]
    assert _read(so_far, "pdf").startswith(b"%PDF-")
    assert not Statement.objects.exists()  # made on each request, never kept

    # a later ask sees the lines since; its files are the ones drawn, as of then, for a while
    time_machine.move_to(now + timedelta(minutes=1))
    _charge(user, instance.id, 2, 250)
    time_machine.move_to(now + timedelta(minutes=2))
    later = statement_for(tenant_id=user.tenant_id, month=current_month())
    assert later.lines == 4
    assert _read(later, "csv").decode("utf-8") == text
    cache.delete(f"statement-so-far:{user.tenant_id}:csv")  # kept for STATEMENT_SO_FAR_CACHE_S
    assert "2026-11-10 12:32:00" in _read(later, "csv").decode("utf-8")


def test_future_months_and_months_before_the_account_are_refused(db, time_machine):
    time_machine.move_to(datetime(2026, 11, 10, 12, 0, tzinfo=TZ))
    user = make_user()
    with pytest.raises(InvalidInput) as refused:
        statement_for(tenant_id=user.tenant_id, month=date(2026, 12, 1))
    assert refused.value.code == "month_not_closed"
    assert "2026-12 has not begun yet" in refused.value.message
    with pytest.raises(NotFound):
        statement_for(tenant_id=user.tenant_id, month=date(2026, 10, 1))
    assert not Statement.objects.exists()


def test_beat_task_makes_last_months_statements_once_for_tenants_due(db, time_machine):
    time_machine.move_to(datetime(2026, 11, 10, 12, 0, tzinfo=TZ))
    active, idle = make_user(), make_user(verified=False)  # idle: no trial, no ledger
    fund(active, 1_000)
    time_machine.move_to(datetime(2026, 12, 1, 1, 30, tzinfo=TZ))
    assert tenants_due(NOV) == [active.tenant_id]
    generate_statements.delay()
    generate_statements.delay()
    assert list(Statement.objects.values_list("tenant_id", "month")) == [(active.tenant_id, NOV)]
    assert idle.tenant_id not in tenants_due(NOV)
    assert statements_generate_month() == 0


def test_usage_grouped_by_instance_day_and_member(db, time_machine):
    time_machine.move_to(datetime(2026, 11, 10, 23, 58, tzinfo=TZ))
    user = make_user()
    fund(user, 50_000)
    instance = make_instance(user)
    _charge(user, instance.id, 1, 100)
    time_machine.move_to(datetime(2026, 11, 11, 0, 1, tzinfo=TZ))
    _charge(user, instance.id, 2, 100)
    _charge(user, instance.id, 3, 50)
    ledger_post(
        wallet_id=user.tenant.wallet.id,
        key="storage:dsk_gone:2026-11-11",
        kind=TransactionKind.USAGE,
        amount_fen=-30,
        description="Cloud disk storage",
    )

    by_instance = usage_report(
        tenant_id=user.tenant_id, start=NOV, end=date(2026, 11, 30), group_by="instance"
    )
    assert [r.as_dict() for r in by_instance.rows] == [
        {
            "key": instance.id,
            "label": f"{instance.name} ({instance.id})",
            "minutes": 3,
            "gpu_hours": 0.05,
            "amount_fen": 250,
        },
        {
            "key": "dsk_gone",
            "label": "Cloud disk storage (dsk_gone)",
            "minutes": 0,
            "gpu_hours": 0.0,
            "amount_fen": 30,
        },
    ]
    assert by_instance.totals.amount_fen == 280
    by_day = usage_report(
        tenant_id=user.tenant_id, start=NOV, end=date(2026, 11, 30), group_by="day"
    )
    assert [(r.key, r.minutes, r.amount_fen) for r in by_day.rows] == [
        ("2026-11-10", 1, 100),
        ("2026-11-11", 2, 180),
    ]
    by_member = usage_report(
        tenant_id=user.tenant_id, start=NOV, end=date(2026, 11, 30), group_by="member"
    )
    assert [(r.key, r.label, r.amount_fen) for r in by_member.rows] == [
        (str(user.pk), user.email, 250),
        ("account", "Storage and account-wide charges", 30),
    ]
    only_the_10th = usage_report(
        tenant_id=user.tenant_id, start=date(2026, 11, 10), end=date(2026, 11, 10), group_by="day"
    )
    assert [(r.key, r.amount_fen) for r in only_the_10th.rows] == [("2026-11-10", 100)]


def test_endpoint_usage_counts_replica_minutes_under_its_creator(db):
    from compute.models import Offering

    _seed_catalog()
    user = make_user()
    fund(user, 50_000)
    endpoint = make_endpoint(
        user, name="qwen", offering_id=Offering.objects.get(name="2× H100 80GB SXM").id
    )
    for replica, minutes in (("epr_a", 3), ("epr_b", 2)):  # two replicas, one at a time or both
        for minute in range(1, minutes + 1):
            ledger_post(
                wallet_id=user.tenant.wallet.id,
                key=f"endpoint:{replica}:1:{minute}",
                kind=TransactionKind.USAGE,
                amount_fen=-100,
                description="Inference endpoint",
                instance_id=endpoint.id,
            )
    today = timezone.localdate()

    by_instance = usage_report(
        tenant_id=user.tenant_id, start=today, end=today, group_by="instance"
    )
    assert [r.as_dict() for r in by_instance.rows] == [
        {
            "key": endpoint.id,
            "label": f"Inference endpoint qwen ({endpoint.id})",
            "minutes": 5,  # replica-minutes
            "gpu_hours": 0.17,  # 5 × 2 GPUs
            "amount_fen": 500,
        }
    ]
    by_member = usage_report(tenant_id=user.tenant_id, start=today, end=today, group_by="member")
    assert [(r.key, r.label, r.minutes, r.amount_fen) for r in by_member.rows] == [
        (str(user.pk), user.email, 5, 500)
    ]


def test_usage_is_one_query_per_report(db, django_assert_num_queries):
    user = make_user()
    fund(user, 50_000)
    instance = make_instance(user)
    for minute in range(1, 30):
        _charge(user, instance.id, minute, 10)
    # the aggregate, then the instances, the endpoints and the disks named
    with django_assert_num_queries(4):
        usage_report(
            tenant_id=user.tenant_id,
            start=date.today() - timedelta(days=1),
            end=date.today() + timedelta(days=1),
            group_by="day",
        )


def test_missing_font_is_a_clear_error(db, settings, time_machine):
    time_machine.move_to(datetime(2026, 11, 10, 12, 0, tzinfo=TZ))
    user = make_user()
    time_machine.move_to(datetime(2026, 12, 2, 12, 0, tzinfo=TZ))
    settings.STATEMENT_FONT = "/nonexistent/font.ttc"
    with pytest.raises(ImproperlyConfigured, match="fonts-wqy-microhei"):
        statement_generate(tenant_id=user.tenant_id, month=NOV)
    assert not Statement.objects.exists()


def test_the_api_answers_the_month_so_far_and_closed_months(db, time_machine, client_for):
    time_machine.move_to(datetime(2026, 11, 10, 12, 0, tzinfo=TZ))
    user = make_user()
    fund(user, 5_000)
    time_machine.move_to(datetime(2026, 12, 2, 8, 0, tzinfo=TZ))
    api = client_for(user)

    so_far = api.get("/api/v1/billing/statements/2026-12").json()
    assert (so_far["id"], so_far["final"], so_far["month"]) == (None, False, "2026-12")
    assert so_far["as_of"].startswith("2026-12-02T08:00:00")
    assert so_far["closing_fen"] == so_far["opening_fen"] == 6_000
    pdf = api.get("/api/v1/billing/statements/2026-12/pdf")
    assert pdf.status_code == 200 and b"".join(pdf.streaming_content).startswith(b"%PDF-")

    closed = api.get("/api/v1/billing/statements/2026-11").json()
    assert closed["final"] is True and closed["as_of"] is None
    assert closed["id"].startswith("stm_") and closed["closing_fen"] == 6_000
    assert [s["month"] for s in api.get("/api/v1/billing/statements").json()["results"]] == [
        "2026-11"
    ]  # only stored statements are listed
    future = api.get("/api/v1/billing/statements/2027-01")
    assert (future.status_code, future.json()["code"]) == (400, "month_not_closed")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"from": "2026-11-30", "to": "2026-11-01"}, "to"),
        ({"from": "2026-11-01", "to": "2026-11-30", "group_by": "gpu"}, "group_by"),
        ({"from": "yesterday", "to": "2026-11-30"}, "from"),
        ({"from": "2025-01-01", "to": "2026-11-30"}, "to"),
    ],
)
def test_the_usage_api_names_a_bad_parameter(db, client_for, query, field):
    answer = client_for(make_user()).get("/api/v1/billing/usage", query)
    body = answer.json()
    assert (answer.status_code, body["code"], list(body["errors"])) == (400, "invalid", [field])
    assert body["detail"].startswith(f"{field}: ")


def test_one_accounts_failure_keeps_no_other_statement_back(db, time_machine, monkeypatch):
    time_machine.move_to(datetime(2026, 11, 10, 12, 0, tzinfo=TZ))
    broken, fine = make_user(), make_user()
    time_machine.move_to(datetime(2026, 12, 1, 1, 30, tzinfo=TZ))
    real = statement_pdf

    def draw(data):
        if data.tenant_id == broken.tenant_id:
            raise OSError("disk full")
        return real(data)

    monkeypatch.setattr(statements, "statement_pdf", draw)
    assert statements_generate_month() == 1
    assert list(Statement.objects.values_list("tenant_id", flat=True)) == [fine.tenant_id]
    monkeypatch.setattr(statements, "statement_pdf", real)
    assert statements_generate_month() == 1  # run again: the one missing is made


def test_the_beat_hands_each_account_to_a_task_retried_on_its_own(db, time_machine, monkeypatch):
    """The 1st's run queues one task per account without a statement (the workers draw them
    side by side); one whose drawing fails is tried again by itself, the others untouched."""
    time_machine.move_to(datetime(2026, 11, 10, 12, 0, tzinfo=TZ))
    flaky, fine, done = make_user(), make_user(), make_user()
    time_machine.move_to(datetime(2026, 12, 1, 1, 30, tzinfo=TZ))
    statement_generate(tenant_id=done.tenant_id, month=NOV)  # drawn on request already
    queued: list[tuple[str, str]] = []
    monkeypatch.setattr(tasks.generate_statement, "delay", lambda *args: queued.append(args))
    generate_statements()
    assert sorted(queued) == sorted(
        [(flaky.tenant_id, "2026-11-01"), (fine.tenant_id, "2026-11-01")]
    )
    monkeypatch.undo()

    real, drawn = statement_pdf, []

    def draw(data):
        drawn.append(data.tenant_id)
        if data.tenant_id == flaky.tenant_id and drawn.count(flaky.tenant_id) == 1:
            raise OSError("media storage unreachable")
        return real(data)

    monkeypatch.setattr(statements, "statement_pdf", draw)
    generate_statements.delay()  # eager here: each account's task runs, retrying on failure
    assert sorted(drawn) == sorted([flaky.tenant_id, flaky.tenant_id, fine.tenant_id])
    assert set(Statement.objects.values_list("tenant_id", flat=True)) == {
        flaky.tenant_id,
        fine.tenant_id,
        done.tenant_id,
    }


def test_a_long_statement_runs_over_pages_with_its_header_on_each(db):
    """Lines are drawn by position (fast enough for a busy month): they break onto new pages
    themselves, about 67 to a page after the first's summary, rather than running off it."""

    def pdf_pages(count: int) -> int:
        pdf = statement_pdf(statement_of_minutes(count))
        return len(re.findall(rb"/Type /Page\b(?!s)", pdf))

    assert pdf_pages(10) == 1
    assert 9 <= pdf_pages(600) <= 11


def test_a_range_past_the_calendars_end_is_a_400_naming_both_days(db, client_for):
    answer = client_for(make_user()).get(
        "/api/v1/billing/usage", {"from": "9999-12-01", "to": "9999-12-31"}
    )

    body = answer.json()
    wanted = "Enter a date from 1900-01-01 to 9998-12-31."
    assert (answer.status_code, body["code"]) == (400, "invalid")
    assert body["errors"] == {"from": [wanted], "to": [wanted]}
    assert body["detail"] == f"to: {wanted}; from: {wanted}"  # the serializer's field order


def test_the_console_usage_and_a_statement_of_year_9999_are_refused_with_a_message(
    db, client, client_for
):
    user = make_user()
    client.force_login(user)

    query = {"start": "9999-12-01", "end": "9999-12-31", "group_by": "day"}
    page = client.get("/billing/", query)
    download = client.get("/billing/usage.csv", query, follow=True)
    month = client_for(user).get("/api/v1/billing/statements/9999-12")

    assert page.status_code == 200
    assert "Enter a date from 1900-01-01 to 9998-12-31." in page.content.decode()
    assert download.redirect_chain[-1][1] == 302
    assert "Enter a date from 1900-01-01 to 9998-12-31." in download.content.decode()
    assert (month.status_code, month.json()["code"]) == (400, "invalid_month")


FORMULA = '=HYPERLINK("http://evil.example","open")'


def test_a_name_that_would_be_a_formula_is_text_in_the_usage_and_statement_csvs(
    db, time_machine, client_for
):
    time_machine.move_to(datetime(2026, 11, 10, 12, 0, tzinfo=TZ))
    user = make_user("-x@lab.example.edu.cn")
    fund(user, 50_000)
    instance = make_instance(user)
    Instance.objects.filter(pk=instance.pk).update(name=FORMULA)
    _charge(user, instance.id, 1, 1_200)
    time_machine.move_to(datetime(2026, 12, 2, 9, 0, tzinfo=TZ))
    api = client_for(user)
    query = {"from": "2026-11-01", "to": "2026-11-30", "format": "csv"}

    usage = api.get("/api/v1/billing/usage", query).content.decode("utf-8-sig")
    members = api.get("/api/v1/billing/usage", {**query, "group_by": "member"})
    statement = statement_for(tenant_id=user.tenant_id, month=NOV).csv.read().decode("utf-8-sig")

    label = f"'{FORMULA} ({instance.id})"
    assert list(csv.reader(io.StringIO(usage)))[1][:2] == [instance.id, label]
    member_rows = list(csv.reader(io.StringIO(members.content.decode("utf-8-sig"))))
    assert member_rows[1][1] == "'-x@lab.example.edu.cn"
    rows = list(csv.reader(io.StringIO(statement)))
    assert [r for r in rows if r and r[0].endswith(f"({instance.id})")] == [
        [label, "1", "0.02", "12.00"]
    ]
    (charge,) = [r for r in rows if r and r[-1].startswith("txn_") and r[3] == instance.id]
    assert charge[4] == "-12.00"  # our own negative amounts stay numbers
    (debits,) = [r for r in rows if r and r[0].endswith("Debits")]
    assert debits[1] == "-¥12.00"


def test_usage_counts_the_minutes_an_hourly_posting_pays_and_a_reversal_takes_back(
    db, time_machine
):
    time_machine.move_to(datetime(2026, 11, 12, 10, 0, tzinfo=TZ))
    user = make_user()
    fund(user, 50_000)
    instance = make_instance(user)
    wallet = Wallet.objects.get(tenant=user.tenant)
    _charge(user, instance.id, 1, 100)  # a per-minute line from before hourly postings
    with transaction.atomic():
        accrued = usage_accrue_many([Accrual(wallet.id, 37, None)] * 60)
        key = f"usage:{instance.id}:2:1-60"
        cash = sum(a.cash_fen for a in accrued)
        usage_settle_many([Settlement(wallet.id, key, instance.id, "GPU usage", 60, 0, cash, 0)])

    def minutes() -> list[tuple[str, int, int]]:
        report = usage_report(
            tenant_id=user.tenant_id, start=NOV, end=date(2026, 11, 30), group_by="instance"
        )
        return [(r.key, r.minutes, r.amount_fen) for r in report.rows]

    assert minutes() == [(instance.id, 61, 100 + 2220)]
    hourly = LedgerTransaction.objects.get(idempotency_key=key)
    transaction_reverse(transaction_id=hourly.id, reason="outage credit", actor=make_operator())
    assert minutes() == [(instance.id, 1, 100)]


def test_lines_of_one_moment_come_in_posting_order_and_add_up_to_the_closing_balance(
    db, time_machine, client_for
):
    """Postings of the same moment (a meter tick posts many hours at once, each with its cash
    and trial parts) are listed in the order they were posted: each line's balance after is the
    one before plus its amount, and the last is the closing balance, in the statement, its CSV
    and the API's ledger."""
    time_machine.move_to(datetime(2026, 11, 10, 12, 0, tzinfo=TZ))
    user = make_user()  # the trial credit, ¥10
    fund(user, 50_000)
    wallet_id = user.tenant.wallet.id
    for n in range(3):  # three hours of three instances, in one tick
        minutes = [Accrual(wallet_id, 100 + n, 10) for _ in range(60)]
        with transaction.atomic():
            accrued = usage_accrue_many(minutes)
            usage_settle_many(
                [
                    Settlement(
                        wallet_id,
                        f"usage:ins_order{n}:1:0-59",
                        f"ins_order{n}",
                        "GPU usage",
                        60,
                        sum(a.trial for a in accrued),
                        sum(a.cash_fen for a in accrued),
                        sum(a.promo_fen for a in accrued),
                    )
                ]
            )
    fund(user, 7_000)
    for minute in range(3):
        _charge(user, "ins_orderx", minute, 333)

    data = statements.statement_data(tenant_id=user.tenant_id, month=NOV)

    assert len(data.lines) >= 8
    assert len({line.created_at for line in data.lines[1:]}) == 1  # all of one moment
    balance = data.opening.total_fen
    for line in data.lines:
        balance += line.amount_fen
        assert line.balance_after_fen == balance, line.id
    assert balance == data.closing.total_fen
    csv_ids = [
        row[-1]
        for row in csv.reader(io.StringIO(statement_csv_text(data)))
        if row and row[-1].startswith("txn_")
    ]
    assert csv_ids == [line.id for line in data.lines]
    listed = client_for(user).get("/api/v1/billing/ledger", {"page_size": 100}).json()["results"]
    assert [row["id"] for row in listed] == [line.id for line in reversed(data.lines)]


def statement_csv_text(data: statements.StatementData) -> str:
    from billing.documents import statement_csv

    return statement_csv(data).decode("utf-8").lstrip("\ufeff")


def test_the_month_so_far_label_fits_beside_its_date(db, time_machine):
    """The PDF's summary labels are in both languages; the month so far's "Month to date, not
    final: as of" is wider than the 60 mm the column had, and its date was printed over it.
    The column is as wide as its longest label."""
    from fpdf import FPDF

    from billing import documents

    time_machine.move_to(datetime(2026, 11, 10, 12, 0, tzinfo=TZ))
    user = make_user()
    data = statements.statement_data(tenant_id=user.tenant_id, month=NOV, until=timezone.now())
    data = statements.StatementData(**{**data.__dict__, "as_of": timezone.now()})
    pdf = FPDF(orientation="P", unit="mm", format="A4")
    pdf.add_font("cjk", fname=documents.font_path(), collection_font_number=0)
    pdf.set_font("cjk", size=9)
    summary = documents._summary(data)
    label = next(label for label, _value in summary if "Month to date" in label)

    width = documents.summary_label_width(pdf, summary)

    assert pdf.get_string_width(label) > 60  # the old column was too narrow for it
    assert width >= pdf.get_string_width(label) + 2
    assert documents.statement_pdf(data).startswith(b"%PDF")
