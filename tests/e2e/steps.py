"""Steps the browser journeys share: logging in through the forms, confirming a dialog, the
text the console shows in a language, and GPU reports from the real node agent."""

import contextlib
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyotp
from django.core.management import call_command
from django.utils import translation
from playwright.sync_api import Page

from devstack.kube import KubeEmulator
from fleet.models import Node
from fleet.services import node_token_issue, nodes_sync_from_cluster
from instances.provisioning import converge
from nodeagent.__main__ import main as nodeagent_main
from starverse.core import kube
from tests.factories import converge_until

PASSWORD = "correct horse battery staple"


def t(lang: str, message: str, **values: Any) -> str:
    """`message` as the console shows it in `lang` (the catalogue the templates use)."""
    with translation.override(lang):
        text = translation.gettext(message)
    return text % values if values else text


def log_in(page: Page, base: str, email: str, password: str = PASSWORD) -> None:
    """The log-in form, as a person fills it; lands where the console sends them."""
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", email)
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.click("form.form button[type=submit]")


def log_in_operator(page: Page, base: str, email: str, totp_secret: str) -> None:
    """An operator's log-in: the password, then a code of their authenticator app. The app's
    next code (30 s on, within the drift allowed): its current one may be the code that just
    confirmed the enrolment, and each code is accepted once."""
    page.goto(f"{base}/admin/")
    page.wait_for_url("**/accounts/login/**")
    page.fill("input[name=username]", email)
    page.fill("input[name=password]", PASSWORD)
    with page.expect_navigation():
        page.click("form.form button[type=submit]")
    page.wait_for_url("**/accounts/login/verify/**")
    page.fill("input[name=code]", pyotp.TOTP(totp_secret).at(time.time() + 30))
    with page.expect_navigation():
        page.click("form.form button[type=submit]")


def submit_confirmed(page: Page, selector: str) -> str:
    """Click a submit button whose form asks `confirm()` first, say yes, and wait for the page
    the form leads to; returns the question asked."""
    asked: list[str] = []

    def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    with page.expect_navigation():
        page.click(selector)
    assert asked, "the form did not ask before it was sent"
    return asked[0]


def agent_reports(base: str, kube_url: str, node_name: str, count: int = 3) -> None:
    """`count` reports from the real node agent (`python -m nodeagent --once`, in this process)
    on simulated NVML that follows the node's pods on the emulator, delivered over HTTP."""
    node = Node.objects.get(name=node_name)
    token = node_token_issue(node=node)
    argv = ["--once", "--source", "sim", "--kube-url", kube_url]
    argv += ["--platform-url", base, "--node", node_name, "--token", token, "--log-level", "ERROR"]
    for _ in range(count):
        with contextlib.redirect_stderr(io.StringIO()) as err:
            code = nodeagent_main(argv)
        assert code == 0, err.getvalue()


def settle(instance_id: str) -> str:
    """Carry an instance's stop, start and termination through as the worker's retrying tasks
    do. In tests they run eagerly, their retries back to back without the countdown, so on a
    busy machine they can give up before the emulated pod has gone; the page then shows what
    the next poll reads. Returns the status reached."""
    status = ""
    for step in (converge.stop, converge.provision, converge.terminate):
        status = converge_until(step, instance_id)
    return status


# What does not fit, under the page's content box: elements whose right edge passes the window,
# and boxes whose content is wider than they are and so scroll or clip it sideways (Django's
# result list scrolls in its own box: the page fits while the columns on the right are hidden).
MEASURE = """(root) => {
  const limit = window.innerWidth;
  const name = (e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`;
  const wide = [], clipped = [];
  for (const element of document.querySelector(root).querySelectorAll("*")) {
    const box = element.getBoundingClientRect();
    if (box.width && box.right > limit + 0.5) {
      wide.push(`${name(element)} right=${box.right}`);
    }
    const overflow = getComputedStyle(element).overflowX;
    // (form fields scroll their own text; a 1-px box is text for screen readers only)
    if (overflow !== "visible" && !element.matches("input, textarea, select")
        && element.clientWidth > 1 && element.scrollWidth > element.clientWidth + 1) {
      clipped.push(`${name(element)} ${element.scrollWidth} > ${element.clientWidth}`);
    }
  }
  return {scroll: document.scrollingElement.scrollWidth, inner: limit,
          wide: wide.slice(0, 8), clipped: clipped.slice(0, 8)};
}"""


def fits(page: Page, root: str = "#content") -> dict[str, Any]:
    """Asserts that nothing under `root` is wider than the window or clipped sideways; the
    measure, for a failure's message."""
    measured = page.evaluate(MEASURE, root)
    assert measured["scroll"] <= measured["inner"], measured
    assert not measured["wide"] and not measured["clipped"], measured
    return measured


@contextlib.contextmanager
def platform_on(emulator: KubeEmulator, settings: Any, tmp_path: Path) -> Iterator[KubeEmulator]:
    """The platform pointed at a started emulator, the catalog seeded and the emulator's nodes
    mirrored; the emulator stopped after."""
    settings.KUBECONFIG = str(emulator.write_kubeconfig(tmp_path / "kubeconfig"))
    kube._api_client.cache_clear()
    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    try:
        yield emulator
    finally:
        kube._api_client.cache_clear()
        emulator.stop()
