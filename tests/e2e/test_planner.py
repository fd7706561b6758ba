"""The parallelism planner in the browser, in both languages: its inputs line up row by row,
the page fits a 1280 px window, and a plan is ordered as a cluster: "Order a cluster with this
plan" opens the cluster order form filled with the offering, the node count and the tensor /
pipeline sizes."""

from pathlib import Path

from django.core.management import call_command
from playwright.sync_api import Page, expect

from compute.models import Offering
from tests.e2e.steps import fits, log_in, t
from tests.factories import fund, make_user

SHOTS = Path("/tmp/shots-pub")

# Each input's top edge, by the top edge of its field's row: inputs of one row start together.
TOPS = """(selector) => {
  const rows = {};
  for (const field of document.querySelectorAll(selector)) {
    const row = Math.round(field.getBoundingClientRect().top);
    const input = field.querySelector("input, select");
    (rows[row] = rows[row] || []).push(Math.round(input.getBoundingClientRect().top));
  }
  return Object.values(rows);
}"""


def _aligned(page: Page, selector: str) -> None:
    rows = page.evaluate(TOPS, selector)
    assert rows and all(len(set(tops)) == 1 for tops in rows), rows


def test_a_plan_is_ordered_as_a_cluster(page: Page, lang, live_server):
    call_command("seed_catalog", verbosity=0)
    base = live_server.url
    user = make_user()
    fund(user, 10_000_000)
    log_in(page, base, user.email)

    page.goto(f"{base}/clusters/plan/?preset=llama-70b&gpu_model=h100-80g&node_count=4")
    expect(page.locator("#plan-tp")).to_have_text("8")
    expect(page.locator("#plan-pp")).to_have_text("1")
    _aligned(page, ".plan-fields > .field")
    fits(page)
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=SHOTS / f"planner-{lang}.png", full_page=True)

    order = page.locator("#plan-order")
    expect(order).to_have_text(t(lang, "Order a cluster with this plan"))
    with page.expect_navigation():
        order.click()
    expect(page.locator("h1")).to_have_text(t(lang, "Order a cluster"))
    node = Offering.objects.get(slug="h100-80g-bare-metal")
    expect(page.locator(f"input[name=offering][value='{node.id}']")).to_be_checked()
    expect(page.locator("input[name=node_count]")).to_have_value("4")
    expect(page.locator("input[name=tensor_parallel]")).to_have_value("8")
    expect(page.locator("input[name=pipeline_parallel]")).to_have_value("1")
    expect(page.locator("label[for=cluster-tensor]")).to_contain_text(
        t(lang, "Tensor parallel size (TP)")
    )
    expect(page.locator("label[for=cluster-pipeline]")).to_contain_text(
        t(lang, "Pipeline parallel size (PP)")
    )
    _aligned(page, ".cluster-count > .field")
    fits(page)
    page.screenshot(path=SHOTS / f"cluster-new-{lang}.png", full_page=True)
