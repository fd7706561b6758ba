"""The admin in both languages: an operator whose browser asks for Chinese reads the admin's
chrome (Django's own catalogue), the project's name and every model's, field's and filter's
name in Chinese; in English, the project's name where Django's stood."""

import re

from django.core.management import call_command
from playwright.sync_api import Page, expect

from tests.e2e.steps import log_in_operator, t
from tests.factories import enrol_totp, make_operator

# The pages read: the index and a few changelists (with rows, so their columns show).
CHANGELISTS = ["/admin/fleet/node/", "/admin/compute/offering/", "/admin/datasets/publicdataset/"]
# What carries the admin's words: the header, headings, the index's model list, the columns,
# the filters, the add button and the result count.
WORDS = (
    "#site-name, #content h1, #content-main caption, #content-main th[scope=row], "
    "#result_list thead th, #changelist-filter h3, .object-tools a, .paginator"
)
# Latin words a Chinese page keeps: product and protocol names, units, and what a cell shows.
KEPT = {"Starverse", "GPU", "NVLink", "PCIe", "SSH", "API", "TOTP", "NAS", "Stripe", "ID", "GB"}
KEPT |= {"MB", "CSV", "PDF", "Pod", "IP", "rank", "Checkout", "RDMA", "NCCL", "kubeconfig"}


def _latin_words(page: Page) -> set[str]:
    texts = page.locator(WORDS).all_inner_texts()
    return {word for text in texts for word in re.findall(r"[A-Za-z]{2,}", text)} - KEPT


def test_the_admin_speaks_the_operators_language(page: Page, lang, live_server, catalog):
    call_command("seed_datasets", verbosity=0)
    base = live_server.url
    operator = make_operator()
    secret, _codes = enrol_totp(operator)
    log_in_operator(page, base, operator.email, secret)
    expect(page).to_have_url(f"{base}/admin/")

    expect(page.locator("#site-name")).to_have_text(t(lang, "Starverse operations"))
    assert page.title() == f"{t(lang, 'Site administration')} | {t(lang, 'Starverse operations')}"
    fleet = page.locator("#content-main .app-fleet caption")
    expect(fleet).to_have_text(t(lang, "Fleet"))
    nodes = page.locator("#content-main .model-node th[scope=row]")
    expect(nodes).to_have_text(t(lang, "nodes").capitalize())
    if lang == "zh-hans":
        assert _latin_words(page) == set()

    for path in CHANGELISTS:
        page.goto(f"{base}{path}")
        expect(page.locator("#result_list")).to_be_visible()
        if lang == "zh-hans":
            assert _latin_words(page) == set(), path
        else:
            expect(page.locator("#site-name")).to_have_text("Starverse operations")

    page.goto(f"{base}/admin/fleet/node/")
    add = page.locator(".object-tools a.addlink")
    expect(add).to_have_text({"en": "Add node", "zh-hans": "增加 节点"}[lang])
    state_filter = page.locator("#changelist-filter details[data-filter-title] summary").first
    expect(state_filter).to_have_text({"en": "By state", "zh-hans": "以 状态"}[lang])
