"""The public home page in the browser, in both languages: the price list of the catalog, the
storage prices, the links to the public tools and the way in; it fits a 1280 px window."""

from pathlib import Path

from django.core.management import call_command
from playwright.sync_api import Page, expect

from compute.models import Offering
from tests.e2e.steps import fits, t

SHOTS = Path("/tmp/shots-pub")


def test_a_visitor_sees_prices_and_the_tools(page: Page, lang, live_server):
    call_command("seed_catalog", verbosity=0)
    base = live_server.url
    page.goto(f"{base}/")

    expect(page).to_have_url(f"{base}/")
    expect(page.locator("html")).to_have_attribute("lang", lang)
    rows = page.locator("table.home-prices tbody tr")
    expect(rows).to_have_count(Offering.objects.filter(active=True).count())
    bare = page.locator("tr[data-offering=h100-80g-bare-metal]")
    expect(bare.locator("[data-price=hour]")).to_have_text(f"¥160.00 {t(lang, '/ hour')}")
    expect(bare.locator("[data-price=month]")).to_have_text(f"¥128,000.00 {t(lang, '/ month')}")
    expect(bare.locator("[data-price=trial]")).to_have_text(f"¥10.00 {t(lang, '/ hour')}")
    expect(page.locator("tr[data-storage=egress]")).to_contain_text(t(lang, "No egress fees"))
    fits(page, "body")
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=SHOTS / f"home-{lang}.png", full_page=True)

    page.click("#home-calculator")
    expect(page.locator("h1")).to_have_text(t(lang, "Cost calculator"))
    page.go_back()
    page.click("#home-planner")
    expect(page.locator("h1")).to_have_text(t(lang, "Parallelism planner"))
    page.go_back()
    page.click("#home-signup")
    expect(page).to_have_url(f"{base}/accounts/signup/")
