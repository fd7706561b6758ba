"""A job through the console, in both languages: the empty list says what a job is, the form
submits the simulated trainer and lands on the job's page, whose log viewer shows the trainer's
lines as they come; cancel asks first, and once the job has ended the page has nothing left to
cancel."""

import contextlib
import re
import threading
from collections.abc import Iterator

from django.db import connection
from playwright.sync_api import Page, expect

from instances.models import Instance
from instances.provisioning import converge
from instances.provisioning.logs import logs_ship
from jobs.models import Job
from jobs.services import job_sync
from tests.e2e.steps import log_in, submit_confirmed, t
from tests.factories import converge_until, fund, make_user

NAME = "sim-sft"
# 400 steps of 0.2 s: running for longer than the test looks at it
COMMAND = "starverse-sim-train --steps 400 --step-seconds 0.2"


@contextlib.contextmanager
def worker_shipping_logs(every_s: float = 0.3) -> Iterator[None]:
    """The worker's pass that ships the pods' output into the database (the web tier reads
    logs there), in a thread of its own as the worker runs it."""
    stop = threading.Event()

    def ship() -> None:
        try:
            while not stop.wait(every_s):
                logs_ship()
        finally:
            connection.close()

    thread = threading.Thread(target=ship, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def _log_steps(page: Page) -> list[str]:
    text = page.locator("#job-log").inner_text()
    return [line.split(" loss=")[0] for line in text.splitlines() if line.startswith("step ")]


def test_a_job_submitted_in_the_console_shows_its_log_as_it_comes_and_cancel_asks_first(
    page: Page, lang, live_server, catalog
):
    user = make_user()
    fund(user, 1_000_000)
    base = live_server.url
    log_in(page, base, user.email)

    page.goto(f"{base}/console/jobs/")
    expect(page.locator(".empty-title")).to_have_text(t(lang, "No jobs yet"))
    expect(page.locator(".nav-link.is-active")).to_contain_text(t(lang, "Jobs"))
    page.click(f".empty-actions a:has-text('{t(lang, 'Submit a job')}')")
    page.wait_for_url("**/console/jobs/new/")
    page.check(f'input[name=offering][value="{catalog["h100x1"].id}"]')
    page.fill("#job-name", NAME)
    page.fill("#job-command", COMMAND)
    page.fill("#job-env", "LR=3e-5")
    with page.expect_navigation():
        page.click("button[data-submit]")

    page.wait_for_url(re.compile(r"/console/jobs/job_\w+/$"))
    job = Job.objects.get(tenant=user.tenant)
    assert (job.name, job.command, job.env) == (NAME, COMMAND, {"LR": "3e-5"})
    expect(page.locator("main h1")).to_contain_text(NAME)
    expect(page.locator("#job-command")).to_have_text(COMMAND)
    rank = Instance.objects.get(job_rank__job=job)
    assert converge_until(converge.provision, rank.id) == "running"
    assert job_sync(job.id) == "running"
    # the page reads itself again when the status changes, then stays
    expect(page.locator(".inst-title [data-status-badge]")).to_have_attribute(
        "data-status", "running"
    )
    page.evaluate("window.stayed = true")

    with worker_shipping_logs():
        # the viewer follows the program: its first step, then later ones, without a reload
        expect(page.locator("#job-log")).to_contain_text("step 1/400", timeout=15_000)
        first = _log_steps(page)
        expect(page.locator("#job-log")).to_contain_text(
            f"step {len(first) + 5}/400", timeout=15_000
        )
        later = _log_steps(page)
        assert later[: len(first)] == first and len(later) > len(first)
        assert page.evaluate("window.stayed") is True
        expect(page.locator("#job-log-state")).to_have_text(
            t(lang, "The last %(num)s lines, following the program as it writes.", num=200)
        )

        question = submit_confirmed(page, "form[data-action=cancel] button")
        assert question == t(
            lang,
            "Cancel “%(name)s”? Its program is ended now and billing stops; its logs, checkpoints "
            "and disks are kept. This cannot be undone.",
            name=NAME,
        )
    job.refresh_from_db()
    assert job.status in ("cancelling", "cancelled")
    assert converge_until(converge.terminate, rank.id) == "terminated"
    assert job_sync(job.id) == "cancelled"

    page.goto(f"{base}/console/jobs/{job.id}/")
    expect(page.locator(".inst-title [data-status-badge]")).to_have_attribute(
        "data-status", "cancelled"
    )
    expect(page.locator("form[data-action=cancel]")).to_have_count(0)
    expect(page.locator(".inst-actions")).to_contain_text(
        t(lang, "The job has ended; there is nothing to cancel.")
    )
    expect(page.locator("#job-log")).to_contain_text("step 1/400")  # the kept log
    page.goto(f"{base}/console/jobs/")
    expect(page.locator(f'tr[data-job="{job.id}"] [data-status-badge]')).to_have_attribute(
        "data-status", "cancelled"
    )
