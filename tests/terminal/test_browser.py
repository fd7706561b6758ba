"""The web terminal in a real browser (headless Chromium, the system's, through Playwright): log
in, open a running instance's Terminal tab, run nvidia-smi and echo 你好, read the output from
the page, and leave; the shell in the container ends with the page. Chromium is a CI
requirement (.ci/run installs it): without it this test fails, it does not skip. The browser is
the session's (tests/conftest.py), shared with the browser suite in tests/e2e."""

import re
import time

from playwright.sync_api import Page, expect

from instances.models import InstanceEvent
from tests.factories import PASSWORD, make_instance, make_user


def _rows(page: Page) -> str:
    """What the terminal shows, row by row (xterm's DOM renderer)."""
    return page.locator("#terminal .xterm-rows").inner_text()


def test_a_terminal_in_the_browser_runs_commands_in_the_container(
    transactional_db, catalog, cluster, terminal_service, live_server, settings, browser
):
    user = make_user()
    instance = make_instance(user, status="running")
    settings.KUBE_ACCESS = "exec"
    # the session cookie goes to the terminal's port on the page's own host name
    port = terminal_service.rsplit(":", 1)[1]
    settings.TERMINAL_URL = f"ws://{live_server.url.split('//')[1].split(':')[0]}:{port}"
    settings.PUBLIC_BASE_URL = live_server.url  # the console's own origin opens terminals

    with browser.new_context(locale="en-US", viewport={"width": 1280, "height": 900}) as context:
        page = context.new_page()
        page.set_default_timeout(10_000)
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("input[name=username]", user.email)
        page.fill("input[name=password]", PASSWORD)
        page.click("form.form button[type=submit]")
        page.goto(f"{live_server.url}/console/instances/{instance.id}/")
        page.click("nav.tabs a[href$='/terminal/']")
        expect(page.locator("#terminal .xterm-rows")).to_contain_text(f"root@{instance.k8s_name}")

        page.locator("#terminal").click()
        page.keyboard.type("nvidia-smi")
        page.keyboard.press("Enter")
        expect(page.locator("#terminal .xterm-rows")).to_contain_text("No running processes found")
        screen = _rows(page)
        page.keyboard.type("clear")
        page.keyboard.press("Enter")
        page.keyboard.type("echo 你好")
        page.keyboard.press("Enter")
        # the command line, then its output
        expect(page.locator("#terminal .xterm-rows")).to_contain_text(re.compile("你好.*你好"))
        greeting = _rows(page)
        status = page.locator("#terminal-status").inner_text()
        page.close()

    assert "NVIDIA H100 80GB HBM3" in screen and "81559MiB" in screen
    assert greeting.count("你好") == 2  # the echoed command line, and its output
    assert status == "Connected: a shell as root in the container."
    deadline = time.monotonic() + 10
    while (
        cluster.exec_sessions
        or not InstanceEvent.objects.filter(
            instance=instance, message__startswith="Terminal session"
        ).exists()
    ):
        assert time.monotonic() < deadline, "the shell did not end with the page"
        time.sleep(0.05)
