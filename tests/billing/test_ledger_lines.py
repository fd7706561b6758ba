"""Billing's transaction list and the dashboard's recent transactions show a day's usage
postings of one instance as one line (its total, its hours, the postings behind <details>),
while top-ups, monthly rentals and other postings stay lines of their own; the grouping is done
by PostgreSQL over a page at a time, in a fixed number of queries however many postings."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.choices import TransactionKind
from billing.models import Wallet
from billing.selectors import ledger_lines_for_tenant
from billing.services import ledger_post
from tests.factories import fund, make_user, usage_hour


@pytest.fixture
def ledger(db):
    user = make_user()  # ¥10.00 of trial credit (not spent: these minutes have no trial price)
    fund(user, 50_000)
    wallet = Wallet.objects.get(tenant=user.tenant)
    usage_hour(wallet, "ins_a", 0)
    usage_hour(wallet, "ins_b", 0, fen_per_minute=5)
    fund(user, 10_000)
    usage_hour(wallet, "ins_a", 1)
    usage_hour(wallet, "ins_a", 2)
    ledger_post(
        wallet_id=wallet.id,
        key="monthly:ins_m:1",
        kind=TransactionKind.USAGE,
        amount_fen=-3_000,
        instance_id="ins_m",
        description="Monthly rental",
    )
    return user


def test_a_days_usage_of_one_instance_is_one_line_at_its_last_posting(ledger):
    lines = ledger_lines_for_tenant(ledger.tenant_id)

    assert len(lines) == 6
    rows = [
        (line.last.kind, line.last.description, line.count, line.amount_fen, line.hours)
        for line in lines[0:25]
    ]
    assert rows == [
        ("usage", "Monthly rental", 1, -3_000, "0"),
        ("usage", "GPU usage", 3, -360, "3"),  # ins_a: three hours, around the top-up
        ("topup", "Top-up", 1, 10_000, "0"),
        ("usage", "GPU usage", 1, -300, "1"),  # ins_b: one hour, a line of its own
        ("topup", "Top-up", 1, 50_000, "0"),
        ("trial", "Trial credit", 1, 1_000, "0"),
    ]
    group = lines[1:2][0]
    assert [txn.amount_fen for txn in group.postings] == [-120, -120, -120]
    # the balance after the group is the one after its last posting
    assert group.last.balance_after_fen == 1_000 + 50_000 - 300 + 10_000 - 360
    assert [line.count for line in lines[2:4]] == [1, 1]


def test_the_billing_page_shows_the_group_with_its_postings(ledger, client):
    client.force_login(ledger)

    html = client.get("/billing/").content.decode()

    table = html[html.index('id="transactions"') :]
    table = table[: table.index("</section>")]
    assert table.count("<tr>") == 1 + 6  # the head and six lines
    assert table.count('<details class="ledger-group" data-postings="3">') == 1
    assert "3 h in 3 postings" in table
    assert len(re.findall(r"<li><span class=\"muted nowrap\">", table)) == 3
    assert "6 lines" in html


def test_the_dashboard_groups_too(ledger, client):
    client.force_login(ledger)

    html = client.get("/console/").content.decode()

    recent = html[html.index("Recent transactions") :]
    recent = recent[: recent.index("</section>")]
    assert recent.count("<tr>") == 1 + 5
    assert recent.count('data-postings="3"') == 1


def test_the_lines_of_a_page_are_three_queries_however_many_postings(ledger):
    wallet = Wallet.objects.get(tenant=ledger.tenant)
    for n in range(3, 55):
        usage_hour(wallet, "ins_a", n)
    lines = ledger_lines_for_tenant(ledger.tenant_id)

    with CaptureQueriesContext(connection) as queries:
        count, page = len(lines), lines[0:25]

    assert len(queries) == 3
    assert count == 6
    assert page[0].count == 55
    # a group lists its last 48 postings (two days' worth of hourly postings), never all
    assert [txn.seq for txn in page[0].postings] == list(
        range(page[0].last.seq, page[0].last.seq - 48, -1)
    )


def test_a_disks_charges_of_a_day_are_one_line_without_hours(db, client):
    user = make_user()
    fund(user, 10_000)
    wallet = Wallet.objects.get(tenant=user.tenant)
    for key, fen in (
        ("storage:dsk_1:2026-12-02", 70),
        ("storage:dsk_2:2026-12-02", 35),
        ("storage-grow:dsk_1:2026-12-02:20", 20),
    ):
        ledger_post(
            wallet_id=wallet.id,
            key=key,
            kind=TransactionKind.USAGE,
            amount_fen=-fen,
            description="Cloud disk storage",
        )
    client.force_login(user)

    lines = ledger_lines_for_tenant(user.tenant_id)[0:25]

    assert [(line.count, line.amount_fen) for line in lines[:2]] == [(2, -90), (1, -35)]
    html = client.get("/billing/").content.decode()
    assert '<span class="muted small" data-field="hours">2 postings</span>' in html
