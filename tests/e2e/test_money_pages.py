"""Where money is shown and spent, in Chinese and in English at 1280 px: Billing and the
dashboard group a day's usage of one instance into one line that opens to its postings, every
page that spends says whose wallet pays, and Rent prices an hour on trial credit at the trial
price it is charged. Screenshots of each page go to /tmp/shots-bill/ for a person to look at."""

from pathlib import Path

from playwright.sync_api import Page, expect

from billing.models import Wallet
from tests.e2e.steps import fits, log_in, t
from tests.factories import fund, make_user, usage_hour

SHOTS = Path("/tmp/shots-bill")


def _shot(page: Page, name: str, lang: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}-{lang}.png"), full_page=True)


def test_usage_lines_wallet_and_trial_prices(page: Page, lang, live_server, catalog):
    base = live_server.url
    user = make_user()  # ¥10.00 of trial credit
    fund(user, 50_000)
    wallet = Wallet.objects.get(tenant=user.tenant)
    usage_hour(wallet, "ins_b", 0, 5)
    for n in range(5):
        usage_hour(wallet, "ins_a", n, 2)
    log_in(page, base, user.email)

    page.goto(f"{base}/billing/")
    lines = page.locator("#transactions tbody tr")
    expect(lines).to_have_count(4)  # ins_a's five hours, ins_b's one, the top-up, the trial
    group = lines.nth(0)
    expect(group.locator("summary")).to_contain_text(t(lang, "GPU usage"))
    expect(group.locator("[data-field=hours]")).to_have_text(
        t(lang, "%(hours)s h in %(num)d postings", hours="5", num=5)
        if lang == "en"
        else "5 小时，共 5 笔记账"
    )
    expect(group.locator("td.num").first).to_have_text("-¥6.00")
    expect(group.locator(".ledger-postings li")).to_have_count(5)
    expect(group.locator(".ledger-postings")).to_be_hidden()
    group.locator("summary").click()
    expect(group.locator(".ledger-postings li").first).to_contain_text("-¥1.20")
    expect(lines.nth(1).locator("details")).to_have_count(0)  # ins_b's one hour
    expect(page.locator("[data-charged-to=own]")).to_have_text(
        t(lang, "Charged to: your own wallet (%(balance)s)", balance="¥501.00")
    )
    # (the balance card clips its own decoration on purpose: the sections are measured)
    for root in (".page-header", ".grid-halves", "#transactions"):
        fits(page, root)
    _shot(page, "billing", lang)

    page.goto(f"{base}/console/")
    recent = page.locator("section.card", has_text=t(lang, "Recent transactions"))
    expect(recent.locator("tbody tr")).to_have_count(4)
    expect(recent.locator("details[data-postings='5']")).to_have_count(1)
    recent.locator("summary").click()
    expect(recent.locator(".ledger-postings li")).to_have_count(5)
    fits(page, ".grid-aside")  # (the balance card clips its decoration on purpose)
    _shot(page, "dashboard", lang)

    node = catalog["h100_node"]
    page.goto(f"{base}/console/rent/?offering={node.id}")
    row = page.locator("label.offer", has=page.locator(f"input[value='{node.id}']"))
    expect(row.locator("[data-price-now=trial] strong")).to_have_text("¥10.00")
    expect(row.locator(".offer-after")).to_have_text(
        t(lang, "then %(price)s / hour from cash", price=f"¥{node.price_per_hour_fen / 100:,.2f}")
    )
    expect(page.locator("[data-sum=price]")).to_have_text("¥10.00")
    page.check("input[name=billing][value=monthly]")
    expect(page.locator("[data-sum=price]")).to_have_text(f"¥{node.price_per_hour_fen / 100:,.2f}")
    expect(page.locator("[data-sum=after]")).to_be_hidden()
    page.check("input[name=billing][value=hourly]")
    expect(page.locator("[data-sum=price]")).to_have_text("¥10.00")
    expect(page.locator("[data-sum=after]")).to_be_visible()
    expect(page.locator(".rent-summary [data-charged-to=own]")).to_be_visible()
    fits(page)
    _shot(page, "rent", lang)
