"""The browser suite's fixtures: the session's headless Chromium (Debian's, driven by Playwright:
tests/conftest.py `browser`), a fresh context per test in the test's language, and a watch on
the page that fails the test on a console error, an uncaught exception, a failed request or a
5xx answer. A failed test leaves a full-page screenshot under var/e2e-failures/ and says where.

The console runs in pytest-django's live server (a thread of this process) against the
transactional test database; tasks run eagerly after commit (test settings), the cluster is the
session's kube emulator and payments go to the session's Stripe stand-in, as elsewhere in the
suite. Each test starts from an emptied database, so the accounts a journey needs are made there,
through the services (tests.factories), except the sign-up journey, which makes its own through
the form."""

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Request,
    Response,
    ViewportSize,
    expect,
)

FAILURES = Path(__file__).resolve().parents[2] / "var" / "e2e-failures"
# The console's languages and the browser locale that asks for each (Accept-Language).
BROWSER_LOCALES = {"zh-hans": "zh-CN", "en": "en-US"}
LANGS = list(BROWSER_LOCALES)
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
# A request the page itself gave up (a navigation that replaced a pending poll): not a failure.
ABORTED = "net::ERR_ABORTED"
# Waits, on a machine that also runs the rest of the suite: a page action, and an expectation
# (long enough for a transient status's 3-s poll, twice).
ACTION_TIMEOUT_MS = 15_000
expect.set_options(timeout=10_000)
PROBLEMS = "the page reported problems"


def screenshot_path(item: pytest.Item) -> Path:
    """Where a failure of this test leaves its screenshot: named after the test and its
    parameters (test_journeys.py::test_x[zh-hans] → test_x_zh-hans_.png)."""
    return FAILURES / (re.sub(r"[^\w.-]+", "_", item.nodeid.split("::", 1)[1]) + ".png")


@pytest.fixture(params=LANGS)
def lang(request: pytest.FixtureRequest) -> str:
    """The console language a journey runs in: its browser asks for it (Accept-Language)."""
    return str(request.param)


def _problems_watch(page: Page, problems: list[str]) -> None:
    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console error: {message.text} at {message.location.get('url')}")

    def on_failed(request: Request) -> None:
        if request.failure != ABORTED:
            problems.append(f"request failed: {request.method} {request.url}: {request.failure}")

    def on_response(response: Response) -> None:
        if response.status >= 500:
            request = response.request
            problems.append(f"HTTP {response.status}: {request.method} {response.url}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"uncaught error: {error}"))
    page.on("requestfailed", on_failed)
    page.on("response", on_response)


def _language(request: pytest.FixtureRequest) -> str:
    """The test's `browser_lang` when it has one, else its `lang` when it has that, else English."""
    for name in ("browser_lang", "lang"):
        if name in request.fixturenames:
            return str(request.getfixturevalue(name))
    return "en"


def _open(browser: Browser, language: str, problems: list[str]) -> tuple[BrowserContext, Page]:
    context = browser.new_context(locale=BROWSER_LOCALES[language], viewport=VIEWPORT)
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    opened = context.new_page()
    _problems_watch(opened, problems)
    return context, opened


@pytest.fixture
def page(
    browser: Browser, request: pytest.FixtureRequest, live_server: Any, settings: Any
) -> Iterator[Page]:
    """A new page at 1280×800 whose browser asks for the test's language (`browser_lang` when
    the test has one, else `lang` when it has that, else English), watched for console errors
    and failed requests; the live server's address is the console's public one (links in
    e-mails, Stripe's return pages)."""
    settings.PUBLIC_BASE_URL = live_server.url
    problems: list[str] = []
    context, opened = _open(browser, _language(request), problems)
    screenshot_path(request.node).unlink(missing_ok=True)  # an earlier run's, now stale
    request.node.e2e_problems = problems
    yield opened
    context.close()


@pytest.fixture
def another_page(browser: Browser, request: pytest.FixtureRequest, page: Page) -> Iterator[Page]:
    """A second person's browser beside `page`'s: a context of its own (no shared cookies),
    in the same language and size, whose problems fail the test as `page`'s do."""
    context, opened = _open(browser, _language(request), request.node.e2e_problems)
    yield opened
    context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test whose page logged an error fails, even when its own assertions passed."""
    result = yield
    problems = getattr(item, "e2e_problems", None)
    if problems:
        pytest.fail(f"{PROBLEMS}:\n" + "\n".join(problems), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failure, a screenshot of the page as the test left it, named after the test, and
    what the page reported (when an assertion failed first)."""
    report = yield
    page = getattr(item, "funcargs", {}).get("page")
    problems = getattr(item, "e2e_problems", None)
    if (
        report.when == "call"
        and report.failed
        and problems
        and PROBLEMS not in str(report.longrepr)
    ):
        report.sections.append(("e2e page problems", "\n".join(problems)))
    if report.when == "call" and report.failed and isinstance(page, Page) and not page.is_closed():
        FAILURES.mkdir(parents=True, exist_ok=True)
        path = screenshot_path(item)
        try:
            page.screenshot(path=str(path), full_page=True)
        except Exception as error:  # the browser itself may be what broke
            report.sections.append(("e2e screenshot", f"none: {error}"))
        else:
            report.sections.append(("e2e screenshot", str(path)))
    return report
