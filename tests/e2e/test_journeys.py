"""A newcomer's whole first session in the browser, in Chinese and in English: sign up through
the form, open the e-mailed link and verify, see the trial credit, rent a cloud GPU on the Rent
page with it, watch it run, read its GPU charts (drawn from the real node agent's reports),
stop it and terminate it."""

import re

from playwright.sync_api import Page, expect

from instances.models import Instance
from starverse.accounts.models import User
from tests.e2e.steps import PASSWORD, agent_reports, settle, submit_confirmed, t

OFFERING = "1× RTX 4090 24GB"  # not a premium model, so trial credit may pay for it


def test_sign_up_verify_rent_watch_stop_and_terminate(
    page: Page, lang, live_server, transactional_db, catalog, cluster, mailoutbox
):
    base = live_server.url
    email = f"newcomer-{lang}@lab.example.edu.cn"
    page.goto(f"{base}/accounts/signup/")
    expect(page.locator("html")).to_have_attribute("lang", lang)
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", PASSWORD)
    with page.expect_navigation():
        page.click("form.form button[type=submit]")
    expect(page).to_have_url(f"{base}/console/")
    expect(page.locator("#verify-email")).to_be_visible()
    expect(page.locator(".stat-accent .stat-value")).to_have_text("¥0.00")

    # the e-mail: its link, opened in the browser, and Verify
    assert [message.to for message in mailoutbox] == [[email]]
    link = next(line for line in mailoutbox[0].body.splitlines() if "/verify-email/" in line)
    assert link.startswith(f"{base}/accounts/verify-email/")
    page.goto(link)
    expect(page.locator("h1")).to_have_text(t(lang, "Verify your e-mail address"))
    with page.expect_navigation():
        page.click("form.form button[type=submit]")
    page.goto(f"{base}/console/")
    expect(page.locator("#verify-email")).to_have_count(0)
    expect(page.locator(".stat-accent .stat-value")).to_have_text("¥10.00")

    # Rent: the cheapest cloud GPU, which the trial credit covers
    page.click("a.nav-link[href='/console/rent/']")
    expect(page.locator("h1")).to_have_text(t(lang, "Rent GPUs"))
    page.locator("label.offer", has_text=OFFERING).click()
    # the catalog in the reader's language
    shown = OFFERING if lang == "en" else f"{OFFERING} 云 GPU"
    expect(page.locator("[data-sum=offering]")).to_have_text(shown)
    expect(page.locator("[data-sum=price]")).to_have_text("¥2.20")
    expect(page.locator("[data-sum=covers]")).not_to_have_class(re.compile("is-short"))
    with page.expect_navigation():
        page.click("button[data-submit]")
    instance = Instance.objects.get(tenant__id=User.objects.get(email=email).tenant_id)
    expect(page).to_have_url(f"{base}/console/instances/{instance.id}/")
    assert settle(instance.id) == "running"
    badge = page.locator("h1 [data-status-badge]")
    expect(badge).to_have_attribute("data-status", "running")
    expect(page.locator("#ssh-command")).to_contain_text("ssh -p ")

    # the node agent reports; the charts draw its samples
    instance.refresh_from_db()
    assert instance.node is not None
    agent_reports(base, cluster.url, instance.node.name)
    page.reload()
    charts = page.locator("#charts")
    expect(charts).to_be_visible()
    expect(charts.locator("figure.chart svg.chart-svg")).to_have_count(4)
    expect(charts.locator("figure[data-metric=util] .chart-line")).to_have_count(1)
    expect(charts.locator("figure[data-metric=util] .chart-legend li")).to_have_count(1)
    points = charts.locator("figure[data-metric=util] .chart-line").get_attribute("d") or ""
    assert points.count("L") >= 2, f"three samples make a line of three points: {points}"
    expect(charts.locator("figcaption").first).to_contain_text(t(lang, "GPU utilisation"))

    # stop, after the question
    question = submit_confirmed(page, "form[data-action=stop] button")
    assert instance.name in question
    assert settle(instance.id) == "stopped"
    expect(badge).to_have_attribute("data-status", "stopped")
    expect(page.locator("form[data-action=start]:not([data-no-gpu])")).to_be_visible()
    instance.refresh_from_db()
    assert instance.status == "stopped"

    # terminate
    question = submit_confirmed(page, "form[data-action=terminate] button")
    assert instance.name in question
    assert settle(instance.id) == "terminated"
    expect(badge).to_have_attribute("data-status", "terminated")
    expect(page.locator(".inst-actions")).to_contain_text(
        t(lang, "A terminated instance has no actions left.")
    )
    instance.refresh_from_db()
    assert instance.status == "terminated"
