"""The public cost calculator in the browser: reached in one language and switched to the other
with the console's language menu (both ways), it computes each preset and an edited job through
POST /api/v1/calculator/tco and shows the same figures, line by line, that the calculation
gives (billing.calculator)."""

import copy

import pytest
from django.core.management import call_command
from playwright.sync_api import Page, expect

from billing.calculator import PRESETS, TcoJob, tco_compare
from instances.selectors import calculator_offering
from starverse.core.money import format_fen
from tests.e2e.steps import t

# (the language the browser asks for, the one chosen in the menu)
SWITCHES = [("en", "zh-hans"), ("zh-hans", "en")]


def _shows(page: Page, data: TcoJob) -> None:
    """The three options' totals and the Starverse lines are those of tco_compare(data)."""
    offering = calculator_offering(data["starverse"]["offering"])
    assert offering is not None
    expected = tco_compare(data, offering)
    for option in ("buy", "cloud", "starverse"):
        card = page.locator(f"section.calc-result[data-option={option}]")
        expect(card.locator("[data-out=job]")).to_have_text(format_fen(expected[option]["job_fen"]))
    lines = page.locator("section.calc-result[data-option=starverse] [data-out=lines] tr")
    expect(lines).to_have_count(len(expected["starverse"]["lines"]))
    last = expected["starverse"]["lines"][-1]
    expect(lines.last).to_contain_text(format_fen(last["amount_fen"]))


@pytest.mark.parametrize(("browser_lang", "lang"), SWITCHES)
def test_the_calculator_after_switching_language(page: Page, browser_lang, lang, live_server):
    call_command("seed_catalog", verbosity=0)  # the Starverse column is a catalog offering
    base = live_server.url
    page.goto(f"{base}/billing/calculator/")
    expect(page.locator("html")).to_have_attribute("lang", browser_lang)
    with page.expect_navigation():
        page.locator(".topbar select[name=language]").select_option(lang)
    expect(page.locator("html")).to_have_attribute("lang", lang)
    expect(page).to_have_url(f"{base}/billing/calculator/")
    expect(page.locator("h1")).to_have_text(t(lang, "Cost calculator"))

    # the first preset is computed as the page opens; the second on a click
    first, second = PRESETS[0], PRESETS[1]
    expect(page.locator(f"[data-preset={first['key']}]")).to_have_attribute("aria-pressed", "true")
    _shows(page, first["input"])
    page.click(f"[data-preset={second['key']}]")
    expect(page.locator(f"[data-preset={second['key']}]")).to_have_attribute("aria-pressed", "true")
    _shows(page, second["input"])

    # an edited job: twice the GPUs, so two nodes
    edited = copy.deepcopy(second["input"])
    edited["gpus"] = 16
    page.fill("input[name=gpus]", "16")
    _shows(page, edited)
    expect(page.locator("#calc-error")).to_be_hidden()
