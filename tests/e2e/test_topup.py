"""Topping up in the browser, in Chinese and in English: Billing's quick amount, Stripe's
checkout page (the local stand-in, devstack/stripe), a card payment there, the signed webhook
it sends to the live console, and the balance and the receipt that follow."""

import pytest
from playwright.sync_api import Page, expect

from billing.models import LedgerTransaction
from tests.e2e.steps import log_in, t
from tests.factories import make_user


@pytest.fixture
def checkout(payments, live_server, settings):
    """The Stripe stand-in, delivering its signed webhooks to the live console."""
    payments.webhook_url = f"{live_server.url}/webhooks/stripe"
    settings.STRIPE_WEBHOOK_SECRETS = [payments.webhook_secret]
    return payments


def test_top_up_through_the_checkout_page(
    page: Page, lang, live_server, transactional_db, checkout, mailoutbox
):
    base = live_server.url
    user = make_user()  # verified: ¥10 of trial credit
    log_in(page, base, user.email)
    page.goto(f"{base}/billing/")
    expect(page.locator("h1")).to_have_text(t(lang, "Billing"))
    expect(page.locator(".stat-accent .stat-value")).to_have_text("¥10.00")
    page.locator("#top-up .chip", has_text="¥100.00").click()
    expect(page.locator("#top-up input[name=amount]")).to_have_value("100")
    with page.expect_navigation():
        page.locator("#top-up button[type=submit]").click()

    # Stripe's checkout page (the stand-in's, on its own origin)
    assert page.url.startswith(f"{checkout.url}/"), page.url
    expect(page.locator("h1")).to_be_visible()
    expect(page.locator("p.amount")).to_contain_text("100.00")
    page.check("input[name=method][value=card]")
    with page.expect_navigation(url=f"{base}/billing/"):
        page.locator("form button[type=submit]").click()

    # back on Billing: the payment is credited once, by whichever came first (the webhook or
    # the return page), and the webhook itself was delivered and accepted
    expect(page.locator(".stat-accent .stat-value")).to_have_text("¥110.00")
    cash, trial = page.locator(".stats .stat").nth(1), page.locator(".stats .stat").nth(2)
    expect(cash.locator(".stat-label")).to_have_text(t(lang, "Cash"))
    expect(cash.locator(".stat-value")).to_have_text("¥100.00")
    expect(trial.locator(".stat-value")).to_have_text("¥10.00")
    recent = page.locator("section.card", has_text=t(lang, "Recent top-ups"))
    expect(recent.locator("tbody tr")).to_have_count(1)
    expect(recent.locator("tbody tr")).to_contain_text("¥100.00")
    expect(recent.locator("tbody tr .badge-status-paid")).to_be_visible()
    credits = LedgerTransaction.objects.filter(wallet__tenant=user.tenant, kind="topup")
    assert [row.amount_fen for row in credits] == [10_000]
    deliveries = {event.type: event.status for event in checkout.events}
    assert deliveries.get("checkout.session.completed") == "delivered", deliveries
    page.reload()
    expect(page.locator(".stat-accent .stat-value")).to_have_text("¥110.00")


def test_alipay_is_named_and_an_abandoned_checkout_is_resumed_or_cancelled(
    page: Page, lang, live_server, transactional_db, checkout
):
    """A checkout left unpaid waits on Billing with Resume payment (the same checkout page)
    and Cancel; one paid with Alipay reads "Top-up (Alipay)" in the list and the ledger."""
    base = live_server.url
    user = make_user()
    log_in(page, base, user.email)
    page.goto(f"{base}/billing/")
    page.locator("#top-up .chip", has_text="¥100.00").click()
    with page.expect_navigation():
        page.locator("#top-up button[type=submit]").click()
    checkout_url = page.url
    assert checkout_url.startswith(f"{checkout.url}/pay/"), checkout_url

    # left unpaid: Billing offers to resume it, and resuming opens the same checkout page
    page.goto(f"{base}/billing/")
    recent = page.locator("section.card", has_text=t(lang, "Recent top-ups"))
    row = recent.locator("tbody tr").first
    expect(row.locator(".badge-status-pending")).to_have_text(t(lang, "Awaiting payment"))
    expect(row.locator("[data-action=resume]")).to_have_text(t(lang, "Resume payment"))
    expect(row.locator("[data-action=cancel]")).to_have_text(t(lang, "Cancel"))
    with page.expect_navigation():
        row.locator("[data-action=resume]").click()
    assert page.url == checkout_url
    page.check("input[name=method][value=alipay]")
    with page.expect_navigation(url=f"{base}/billing/"):
        page.locator("form button[type=submit]").click()

    expect(row.locator(".badge-status-paid")).to_be_visible()
    expect(row.locator("[data-field=method]")).to_have_text(t(lang, "Alipay"))
    expect(row.locator("[data-action=resume]")).to_have_count(0)
    ledger = page.locator("#transactions tbody tr").first
    expect(ledger).to_contain_text(t(lang, "Top-up (Alipay)"))
    expect(ledger).to_contain_text("+¥100.00")

    # a second one, abandoned and cancelled: its checkout page is closed at Stripe
    page.locator("#top-up .chip", has_text="¥50.00").click()
    with page.expect_navigation():
        page.locator("#top-up button[type=submit]").click()
    page.goto(f"{base}/billing/")
    with page.expect_navigation():
        row.locator("[data-action=cancel]").click()
    expect(row.locator(".badge-status-cancelled")).to_have_text(t(lang, "Cancelled"))
    expect(row.locator("[data-action]")).to_have_count(0)
    expect(page.locator(".messages")).to_contain_text(
        t(lang, "Top-up of %(amount)s cancelled: nothing was charged.", amount="¥50.00")
    )
    sessions = {s["amount_total"]: s["status"] for s in checkout.sessions}
    assert sessions == {10_000: "complete", 5_000: "expired"}
    assert [row.amount_fen for row in LedgerTransaction.objects.filter(kind="topup")] == [10_000]
