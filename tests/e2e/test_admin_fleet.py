"""The operator's fleet page in the browser, in Chinese and in English: log in with the password
and the authenticator app's code, open Fleet → Nodes from the admin, read the capacity per GPU
model and each node's live GPU grid (the real node agent's reports, a rented GPU busy), then
cordon a node with a reason and find it cordoned on the page and on the cluster."""

import re

import httpx
from playwright.sync_api import Page, expect

from compute.selectors import capacity_by_model
from fleet.models import Node
from tests.e2e.steps import agent_reports, log_in_operator, t
from tests.factories import enrol_totp, make_instance, make_operator, make_user


def test_an_operator_reads_the_fleet_and_cordons_a_node(
    page: Page, lang, live_server, transactional_db, catalog, cluster
):
    base = live_server.url
    instance = make_instance(make_user(), status="running")  # one H100 GPU rented and busy
    nodes = list(Node.objects.order_by("name"))
    for node in nodes:
        agent_reports(base, cluster.url, node.name, count=1)
    operator = make_operator()
    secret, _codes = enrol_totp(operator)
    log_in_operator(page, base, operator.email, secret)
    expect(page).to_have_url(f"{base}/admin/")

    with page.expect_navigation():
        page.locator("#content-main a[href='/admin/fleet/node/']").first.click()
    expect(page.locator("#content h1")).to_have_text(t(lang, "GPU fleet"))

    # the capacity per GPU model, as the selector counts it
    capacity = page.locator("#changelist table").first.locator("tbody tr")
    rows = capacity_by_model()
    expect(capacity).to_have_count(len(rows))
    for shown, row in zip(capacity.all(), rows, strict=True):
        cells = [row["gpu_product"], row["total"], row["allocated"], row["unhealthy"], row["free"]]
        expect(shown.locator("td")).to_have_text([str(cell) for cell in cells])
    assert any(row["allocated"] == 1 for row in rows)

    # every node with its eight GPUs; the rented one busy on its node, the others idle
    listed = page.locator("#result_list tbody tr")
    expect(listed).to_have_count(len(nodes))
    assert instance.node is not None
    busy_row = listed.filter(has=page.locator("th a", has_text=instance.node.name))
    cells = busy_row.locator(".gpu-cell").all_inner_texts()
    assert len(cells) == 8 and sum(int(c) >= 50 for c in cells) == 1, cells
    expect(page.locator("#result_list .gpu-cell")).to_have_count(8 * len(nodes))

    # cordon an idle node, with a reason
    idle = next(node for node in nodes if node.pk != instance.node_id)
    with page.expect_navigation():
        listed.locator("th a", has_text=re.compile(f"^{idle.name}$")).click()
    with page.expect_navigation():
        page.locator("a.button", has_text=t(lang, "Cordon…")).click()
    page.fill("textarea[name=reason]", "fan failure, RMA")
    with page.expect_navigation():
        page.locator("#content-main input[type=submit]").click()
    expect(page.locator(".field-state .readonly")).to_have_text(t(lang, "Cordoned"))
    expect(page.locator(".field-state_reason .readonly")).to_have_text("fan failure, RMA")
    idle.refresh_from_db()
    assert idle.state == "cordoned"
    on_cluster = httpx.get(f"{cluster.url}/api/v1/nodes/{idle.name}", trust_env=False).json()
    assert on_cluster["spec"].get("unschedulable") is True

    page.goto(f"{base}/admin/fleet/node/?state__exact=cordoned")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list tbody tr")).to_contain_text(t(lang, "Cordoned"))
