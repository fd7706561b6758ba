"""Seeded catalogue data in the reader's language: the public pool's titles and licences
(manage.py seed_datasets) and the regions' names (the default region, seeded at migration and
after every flush, and one an operator registered in both languages), in Chinese and in
English. The API keeps English (tests/datasets, tests/instances/test_regions.py)."""

from django.core.management import call_command
from playwright.sync_api import Page, expect

from fleet.services import region_register
from tests.e2e.steps import log_in
from tests.factories import make_user

SEEDED = {
    "en": {
        "c4 title": "C4 English (subset)",
        "llama licence": "Llama 3 Community License",
        "regions": ["East China 1", "Default"],
    },
    "zh-hans": {
        "c4 title": "C4 英文（子集）",
        "llama licence": "Llama 3 社区许可协议",
        "regions": ["华东 1", "默认"],
    },
}


def test_seeded_names_read_in_the_readers_language(page: Page, lang, live_server, transactional_db):
    call_command("seed_datasets", verbosity=0)
    region_register(name="cn-east-1", display_name="East China 1", display_name_zh_hans="华东 1")
    base = live_server.url
    expected = SEEDED[lang]
    log_in(page, base, make_user().email)

    page.goto(f"{base}/console/datasets/")
    c4 = page.locator("[data-dataset=c4-en-subset]")
    expect(c4.locator("h2")).to_have_text(expected["c4 title"])
    llama = page.locator("[data-dataset=llama-3-8b-instruct]")
    expect(llama.locator(".ds-facts div").nth(2).locator("dd")).to_have_text(
        expected["llama licence"]
    )
    # a proper name and an SPDX licence are the same in both languages
    qwen = page.locator("[data-dataset=qwen2-7b-instruct]")
    expect(qwen.locator("h2")).to_have_text("Qwen2 7B Instruct")
    expect(qwen.locator(".ds-facts div").nth(2).locator("dd")).to_have_text("Apache-2.0")

    page.goto(f"{base}/console/disks/")
    expect(page.locator("#disk-region option")).to_have_text(expected["regions"])
