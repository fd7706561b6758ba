"""The team audit log in the browser, in Chinese and in English: each entry a sentence in the
reader's language, the member it names a link to their row on the team's page, the action's
code on hover."""

from playwright.sync_api import Page, expect

from tests.e2e.steps import log_in, t
from tests.factories import make_team_with_budget

BUDGET = {
    "en": "ana@example.com set the monthly budget of bob@example.com to ¥500.00.",
    "zh-hans": "ana@example.com 将 bob@example.com 的月度预算设为 ¥500.00。",
}
CREATED = {"en": "ana@example.com created the team.", "zh-hans": "ana@example.com 创建了团队。"}


def test_the_audit_log_reads_as_sentences(page: Page, lang, live_server, transactional_db):
    base = live_server.url
    ana, bob, team = make_team_with_budget()
    log_in(page, base, ana.email)

    page.goto(f"{base}/teams/{team.pk}/audit/")
    expect(page.locator("h1")).to_have_text(f"{t(lang, 'Audit log')} · Lab")
    said = page.locator("tbody .audit-sentence")
    expect(said).to_have_count(4)
    budget = page.locator('tbody tr[data-action="budget.set"] .audit-sentence')
    expect(budget).to_have_text(BUDGET[lang])
    expect(budget).to_have_attribute("title", "budget.set")
    created = page.locator('tbody tr[data-action="team.created"] .audit-sentence')
    expect(created).to_have_text(CREATED[lang])
    assert "invitation.created" not in page.locator("tbody").inner_text()

    with page.expect_navigation():
        budget.get_by_role("link", name="bob@example.com").click()
    expect(page).to_have_url(f"{base}/teams/{team.pk}/#member-{bob.pk}")
    expect(page.locator(f"#member-{bob.pk} td").first).to_have_text("bob@example.com")
