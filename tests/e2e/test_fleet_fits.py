"""The operator's fleet pages fit a 1280 px screen: the admin's node list, with its capacity
table and a grid of per-GPU cells on every row, and a node's own page, measured in Chromium at
1280×800 with `make run`'s six-node fleet and with a 64-node one. Nothing on them may be wider
than the window: neither the page (it would scroll sideways) nor any element inside it (a
table that scrolls in its own box hides its right-hand columns just the same)."""

from collections.abc import Iterator

import pytest
from django.contrib.admin.utils import quote
from playwright.sync_api import Page, expect

from devstack.kube import KubeEmulator
from fleet.models import Node
from tests.conftest import KUBE_TIMINGS
from tests.e2e.steps import agent_reports, fits, log_in_operator, platform_on
from tests.factories import enrol_totp, make_operator

FLEETS = {
    "6 nodes": None,  # make run's fleet: 2×8 H100, 2×8 A100, 2×8 RTX 4090
    "64 nodes": {"h100": 32, "a100": 16, "rtx4090": 16},
}


@pytest.fixture(params=list(FLEETS))
def fleet(request, settings, tmp_path, transactional_db) -> Iterator[KubeEmulator]:
    """The platform pointed at an emulated cluster of this fleet, its nodes mirrored and the
    catalog seeded."""
    emulator = KubeEmulator(fleet=FLEETS[request.param], **KUBE_TIMINGS).start()
    with platform_on(emulator, settings, tmp_path):
        yield emulator


def test_the_fleet_pages_fit_1280_px(page: Page, live_server, fleet):
    base = live_server.url
    nodes = list(Node.objects.order_by("name"))
    for node in nodes:  # every GPU of every node reported, so each row has its full grid
        agent_reports(base, fleet.url, node.name, count=1)
    operator = make_operator()
    secret, _codes = enrol_totp(operator)
    log_in_operator(page, base, operator.email, secret)

    page.goto(f"{base}/admin/fleet/node/")
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(len(nodes))
    expect(page.locator("#result_list .gpu-cell")).to_have_count(8 * len(nodes))
    fits(page)
    # each node's grid wraps: eight fixed cells, four to a row
    grids = page.eval_on_selector_all(
        "#result_list .gpu-grid",
        "grids => grids.map(g => [g.getBoundingClientRect().width, g.children.length,"
        " new Set([...g.children].map(c => c.getBoundingClientRect().top)).size])",
    )
    assert len(grids) == len(nodes)
    assert all(width <= 110 and cells == 8 and rows == 2 for width, cells, rows in grids), grids

    # a node's own page, reached from its row: its GPUs and events
    with page.expect_navigation():
        rows.first.locator("th a").click()
    expect(page).to_have_url(f"{base}/admin/fleet/node/{quote(nodes[0].pk)}/change/")
    expect(page.locator("#content h2", has_text="GPUs")).to_be_visible()
    expect(page.locator("#gpus-group tbody tr.has_original")).to_have_count(8)
    fits(page)

    # the console's availability view: the Rent page's offerings with what is free
    page.goto(f"{base}/console/rent/")
    expect(page.locator("label.offer").first).to_be_visible()
    fits(page)
