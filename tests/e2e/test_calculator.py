"""The public cost calculator in the browser: reached in one language and switched to the other
with the console's language menu (both ways), it computes each preset and an edited job through
POST /api/v1/calculator/tco and shows the same figures, line by line, that the calculation
gives (billing.calculator). Its presets draw real power (an 8×H100 node's 10.2 kW, PUE 1.3,
¥0.80 per kWh), are named in the page's language, and the verdict says what it compares; the
page fits a 1280 px window."""

import copy
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import translation
from playwright.sync_api import Page, expect

from billing.calculator import PRESETS, TcoJob, tco_compare
from instances.selectors import calculator_offering
from starverse.core.money import format_fen
from tests.e2e.steps import fits, t

SHOTS = Path("/tmp/shots-pub")

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


# The options of a select whose text is wider than the room the select gives it.
TOO_WIDE = """(selector) => {
  const select = document.querySelector(selector);
  const style = getComputedStyle(select);
  const context = document.createElement("canvas").getContext("2d");
  context.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
  const room = select.clientWidth - parseFloat(style.paddingLeft)
    - parseFloat(style.paddingRight);
  return Array.from(select.options)
    .map((option) => [option.text, Math.ceil(context.measureText(option.text).width), room])
    .filter(([, width, space]) => width > space);
}"""


def test_the_presets_draw_real_power_and_the_verdict_says_what_it_compares(
    page: Page, lang, live_server
):
    call_command("seed_catalog", verbosity=0)
    page.goto(f"{live_server.url}/billing/calculator/")

    for preset in PRESETS:  # named in the page's language, with where the power comes from
        button = page.locator(f"[data-preset={preset['key']}]")
        with translation.override(lang):
            name, title = str(preset["name"]), str(preset["title"])
        expect(button.locator(".calc-preset-name")).to_have_text(name)
        expect(button.locator(".calc-preset-title")).to_have_text(title)
    expect(page.locator("[data-preset=cluster_1024] .calc-preset-title")).to_contain_text("10.2 kW")
    # the cluster preset: 128 nodes × 10.2 kW, PUE 1.3, ¥0.80 per kWh
    expect(page.locator("input[name='buy.power_kw']")).to_have_value("1305.6")
    expect(page.locator("input[name='buy.pue']")).to_have_value("1.3")
    expect(page.locator("input[name='buy.electricity']")).to_have_value("0.80")
    _shows(page, PRESETS[0]["input"])
    verdict = t(
        lang,
        "Compared for this %(days)s-day job: buying is the purchase amortised over %(years)s "
        "years, of which the job pays its %(days)s days (as if the cluster were busy the rest of "
        "its life); the two rentals are paid for the job's %(days)s days only.",
        days="42",
        years="5",
    )
    expect(page.locator("#calc-verdict")).to_have_text(verdict)
    # the offering select shows every offering's name whole, its prices beneath it
    assert page.evaluate(TOO_WIDE, "#calc-starverse-offering") == []
    expect(page.locator("#calc-starverse-price")).to_have_text(
        f"¥160.00 {t(lang, '/ hour')} · ¥128,000.00 {t(lang, '/ month')}"
    )
    fits(page)
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=SHOTS / f"calculator-{lang}.png", full_page=True)
