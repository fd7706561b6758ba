"""What a newcomer meets in the browser under `make run`, in Chinese and in English: the API
tokens page's `starverse login --api-url` line for this server (with its copy button), the note
beside an instance's SSH command that make run's emulated pods run no sshd, and the console's own
page for an address that is nobody's or not the visitor's."""

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.steps import log_in, t
from tests.factories import make_instance, make_ssh_key, make_user

NO_SSHD = (
    "This development cluster (make run’s Kubernetes emulator) runs no sshd, so this command "
    "answers nothing; the Terminal tab works. To log in over SSH, restart it as "
    "MAKE_RUN_SSHD=1 make run (see the README)."
)


def test_the_tokens_page_gives_the_cli_login_line_for_this_server(
    page: Page, lang, live_server, transactional_db
):
    base = live_server.url
    user = make_user()
    log_in(page, base, user.email)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    page.goto(f"{base}/accounts/tokens/")

    section = page.locator("#command-line")
    expect(section.locator("h2")).to_have_text(t(lang, "From the command line"))
    expect(section.locator("#login-command")).to_have_text(f"starverse login --api-url {base}")
    section.locator("button[data-copy]").click()
    expect(section.locator("button[data-copy] span")).to_have_text(t(lang, "Copied"))
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == f"starverse login --api-url {base}"


def test_the_instance_page_says_make_runs_pods_run_no_sshd(
    page: Page, lang, live_server, transactional_db, catalog, settings
):
    settings.DEV_PODS_WITHOUT_SSHD = True  # bin/run's export without MAKE_RUN_SSHD=1
    base = live_server.url
    user = make_user()
    make_ssh_key(user)
    instance = make_instance(user, status="running")
    log_in(page, base, user.email)
    page.goto(f"{base}/console/instances/{instance.id}/")

    expect(page.locator("#ssh-command")).to_have_text(f"ssh -p {instance.ssh_port} root@127.0.0.1")
    expect(page.locator("#no-sshd")).to_have_text(t(lang, NO_SSHD))


@pytest.mark.parametrize("whose", ["nobody's", "another tenant's"])
def test_an_address_that_is_not_the_visitors_is_the_consoles_404_page(
    page: Page, lang, live_server, transactional_db, catalog, whose, request
):
    base = live_server.url
    user = make_user()
    log_in(page, base, user.email)
    if whose == "nobody's":
        path = "/console/no-such-page/"
    else:
        path = f"/console/instances/{make_instance(make_user(), status='running').id}/"

    answer = page.goto(f"{base}{path}")

    assert answer is not None and answer.status == 404
    expect(page).to_have_title(f"{t(lang, 'Page not found')} · Starverse")
    expect(page.locator("h1")).to_have_text(t(lang, "Page not found"))
    expect(page.locator(".auth-lead")).to_have_text(
        t(lang, "There is no page at this address, or it is not yours to open.")
    )
    expect(page.locator(".auth-card code")).to_have_text(path)
    expect(page.locator(".auth-card a.btn")).to_have_text(t(lang, "Go to the console"))
    # the 404 itself, which Chromium logs: expected here, and only that
    problems = request.node.e2e_problems
    assert problems == [
        "console error: Failed to load resource: the server responded with a status of 404 "
        f"(Not Found) at {base}{path}"
    ]
    problems.clear()
