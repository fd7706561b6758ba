"""The console's job pages: the list (and its empty state), the submit form (every offering
with its price, refusals at their field with the form kept, one job per form), a job's page
with its log viewer's source following the simulated trainer, cancel (asked first, refused
once ended, not offered to the billing role), and another tenant's job a 404 everywhere; in
English and Chinese."""

import re
import time

import pytest

from compute.models import Offering
from instances.models import Instance
from instances.provisioning import converge
from instances.provisioning.logs import logs_ship
from jobs.models import Job
from jobs.services import JobRequest, job_submit, job_sync
from tests.factories import converge_until, fund, make_disk, make_user
from tests.teams.test_teams import fund_team, join

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN,zh;q=0.9"}
IMAGE = "pytorch-2.1"
WAIT_S = 20


def _token(page) -> str:
    match = re.search(r'name="token" value="([^"]+)"', page.content.decode())
    assert match, "the submit form has no token"
    return match.group(1)


def _trainer(steps: int, seconds: float = 0.05) -> str:
    return f"starverse-sim-train --steps {steps} --step-seconds {seconds}"


def _submit(client, catalog, token=None, headers=None, **extra):
    token = token or _token(client.get("/console/jobs/new/"))
    data = {
        "offering": catalog["h100x1"].id,
        "image": IMAGE,
        "name": "sft",
        "command": _trainer(3),
        "env": "LR=3e-5\n# a comment\n\nWANDB_PROJECT=sft\n",
        "checkpoint_dir": "",
        "max_restarts": "2",
        "time_limit_minutes": "",
        "token": token,
        **extra,
    }
    return client.post("/console/jobs/new/", data, **(headers or {}))


def _submitter(client, fen=1_000_000):
    user = make_user()
    fund(user, fen)
    client.force_login(user)
    return user


def _job_of(user, command: str = "sleep 600") -> Job:
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    job, _created = job_submit(
        user=user, request=JobRequest(offering_id=offering.id, image_id=IMAGE, command=command)
    )
    return job


def _rank(job: Job) -> Instance:
    return Instance.objects.get(job_rank__job=job, job_rank__index=0)


@pytest.mark.parametrize("headers", [{}, ZH], ids=["en", "zh-hans"])
def test_empty_list_says_what_a_job_is_and_the_navigation_leads_there(client, user, headers):
    client.force_login(user)

    page = client.get("/console/jobs/", **headers)

    html = page.content.decode()
    assert page.status_code == 200
    assert 'href="/console/jobs/new/"' in html  # the empty state's button
    assert 'href="/console/jobs/"' in html and 'aria-current="page"' in html
    # Jobs come right after Clusters in the side navigation
    assert html.index('href="/console/clusters/"') < html.index('href="/console/jobs/"')
    assert html.index('href="/console/jobs/"') < html.index('href="/console/endpoints/"')
    if headers:
        assert 'lang="zh-hans"' in html and "作业" in html
    else:
        assert "billed only while it runs" in html
        assert "resumes on another from its checkpoint directory" in html
    assert "{{" not in html


@pytest.mark.parametrize("headers", [{}, ZH], ids=["en", "zh-hans"])
def test_submit_form_offers_every_offering_with_its_price_and_the_programs_variables(
    catalog, client, headers
):
    _submitter(client)

    page = client.get("/console/jobs/new/", **headers)

    html = page.content.decode()
    assert page.status_code == 200
    for name in ("h100x1", "h100x8", "h100_node"):
        assert f'value="{catalog[name].id}"' in html
    assert "¥" in html and catalog["h100x1"].price_per_hour_fen > 0
    for variable in ("STARVERSE_JOB_ID", "STARVERSE_RESTART_COUNT", "STARVERSE_CHECKPOINT_DIR"):
        assert variable in html
    assert 'python train.py --resume-from "$STARVERSE_CHECKPOINT_DIR"' in html.replace("&#34;", '"')
    assert 'name="max_restarts"' in html and 'value="3"' in html
    assert 'name="nas" value="on" disabled' in html  # no NAS on this account
    assert 'placeholder="/root/data/checkpoints/&lt;job id&gt;"' in html
    assert _token(page)


@pytest.mark.parametrize("headers", [{}, ZH], ids=["en", "zh-hans"])
def test_submitting_through_the_form_makes_one_job_and_lands_on_its_page(catalog, client, headers):
    user = _submitter(client)
    token = _token(client.get("/console/jobs/new/"))

    first = _submit(client, catalog, token=token, headers=headers)
    second = _submit(client, catalog, token=token, headers=headers)

    job = Job.objects.get(tenant=user.tenant)
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"] == f"/console/jobs/{job.id}/"
    assert (job.name, job.command, job.max_restarts, job.nas) == ("sft", _trainer(3), 2, False)
    assert job.env == {"LR": "3e-5", "WANDB_PROJECT": "sft"}
    assert job.idempotency_key == "console:" + token
    assert Instance.objects.filter(job_rank__job=job).count() == 1

    page = client.get(first["Location"], **headers)
    html = page.content.decode()
    assert page.status_code == 200
    assert f'id="job-command">{_trainer(3)}</code>' in html
    assert 'data-copy="#job-command"' in html
    assert f'data-src="/console/jobs/{job.id}/logs/?tail=200"' in html
    assert 'data-live="true"' in html
    assert f'action="/console/jobs/{job.id}/cancel/"' in html and "data-confirm=" in html


@pytest.mark.parametrize(
    ("extra", "field", "shown"),
    [
        ({"env": "STARVERSE_JOB_ID=x"}, "env", "STARVERSE_JOB_ID is set by the platform"),
        ({"env": "no equals sign"}, "env", "Line 1 is not KEY=VALUE."),
        ({"nas": "on"}, "nas", "Your account has no NAS"),
        ({"checkpoint_dir": "ckpt"}, "checkpoint_dir", "checkpoint_dir is an absolute path"),
        ({"max_restarts": "-1"}, "max_restarts", "Restarts are 0 or more."),
        ({"command": ""}, "command", "Enter the command the job runs."),
    ],
)
def test_a_refusal_is_shown_at_its_field_with_the_form_kept(catalog, client, extra, field, shown):
    user = _submitter(client)
    token = _token(client.get("/console/jobs/new/"))

    page = _submit(client, catalog, token=token, **extra)

    html = page.content.decode()
    assert page.status_code == 400
    error = re.search(rf'<div class="field-error" id="job-{field}-error">([^<]*)</div>', html)
    assert error and shown in error.group(1), html[html.find("field-error") - 200 :][:600]
    assert 'id="job-error"' in html  # and on top, pointing at it
    assert f'name="token" value="{token}"' in html  # the same form, once corrected
    assert 'value="sft"' in html and (
        extra.get("command") == "" or _trainer(3) in html
    )  # what was typed is kept
    assert not Job.objects.filter(tenant=user.tenant).exists()
    assert not Instance.objects.filter(tenant=user.tenant).exists()


def test_the_log_viewer_reads_the_trainers_lines_as_they_come_then_stops(catalog, client):
    user = _submitter(client)
    job = _job_of(user, _trainer(6, seconds=0.3))
    assert converge_until(converge.provision, _rank(job).id) == "running"
    assert job_sync(job.id) == "running"

    seen: list[list[str]] = []
    deadline = time.monotonic() + WAIT_S
    while True:
        logs_ship()  # the worker's pass (instances.tasks.check_workloads)
        answer = client.get(f"/console/jobs/{job.id}/logs/?tail=200")
        assert answer.status_code == 200 and answer["X-Starverse-Live"] == "1"
        steps = [line.split(" loss=")[0] for line in answer.content.decode().splitlines()]
        steps = [line for line in steps if line.startswith("step ")]
        if not seen or steps != seen[-1]:
            seen.append(steps)
        if "step 6/6" in steps:
            break
        assert time.monotonic() < deadline, seen
        time.sleep(0.1)
    # the lines came in over several reads, each the one before and more
    assert len(seen) >= 3, seen
    assert all(seen[n] == seen[n + 1][: len(seen[n])] for n in range(len(seen) - 1))
    assert seen[-1] == [f"step {n}/6" for n in range(1, 7)]
    tail = client.get(f"/console/jobs/{job.id}/logs/?tail=2").content.decode().splitlines()
    assert len(tail) == 2

    whole = client.get(f"/console/jobs/{job.id}/logs/?download=1")
    assert whole["Content-Disposition"] == f'attachment; filename="{job.id}-attempt-0.log"'
    assert "step 1/6" in whole.content.decode()


def test_the_log_of_an_ended_job_is_its_kept_log_and_more_does_not_come(catalog, client):
    user = _submitter(client)
    job = _job_of(user, _trainer(400))
    rank = _rank(job)
    assert converge_until(converge.provision, rank.id) == "running"
    deadline = time.monotonic() + WAIT_S
    while "step 2/" not in client.get(f"/console/jobs/{job.id}/logs/").content.decode():
        assert time.monotonic() < deadline
        time.sleep(0.05)
        logs_ship()  # the worker's pass (instances.tasks.check_workloads)

    cancel = client.post(f"/console/jobs/{job.id}/cancel/")
    assert cancel.status_code == 302 and cancel["Location"] == f"/console/jobs/{job.id}/"
    assert converge_until(converge.terminate, rank.id) == "terminated"
    assert job_sync(job.id) == "cancelled"

    answer = client.get(f"/console/jobs/{job.id}/logs/")
    assert answer["X-Starverse-Live"] == "0"
    assert "step 2/400" in answer.content.decode()
    page = client.get(f"/console/jobs/{job.id}/").content.decode()
    assert "step 2/400" in page  # the viewer's first lines, in the page
    assert f'action="/console/jobs/{job.id}/cancel/"' not in page
    assert "The job has ended; there is nothing to cancel." in page

    again = client.post(f"/console/jobs/{job.id}/cancel/", follow=True)
    assert "This job has ended (cancelled); there is nothing to cancel." in again.content.decode()
    job.refresh_from_db()
    assert job.status == "cancelled"


def test_the_list_shows_each_job_with_its_status_restarts_and_cost(catalog, client):
    user = _submitter(client)
    job = _job_of(user)

    html = client.get("/console/jobs/").content.decode()

    row = html[html.index(f'data-job="{job.id}"') :]
    row = row[: row.index("</tr>")]
    assert f'href="/console/jobs/{job.id}/"' in row
    assert 'data-status="provisioning"' in row
    assert "H100" in row and "¥0.00" in row


def test_another_tenants_job_is_a_404_on_every_page(catalog, client):
    owner = make_user()
    fund(owner, 1_000_000)
    job = _job_of(owner)
    _submitter(client)

    for method, path in (
        ("get", f"/console/jobs/{job.id}/"),
        ("get", f"/console/jobs/{job.id}/logs/"),
        ("get", f"/console/jobs/{job.id}/logs/?download=1"),
        ("post", f"/console/jobs/{job.id}/cancel/"),
    ):
        assert getattr(client, method)(path).status_code == 404, path
    assert job.id not in client.get("/console/jobs/").content.decode()
    job.refresh_from_db()
    assert job.status == "provisioning"


def test_a_billing_member_sees_the_teams_job_but_may_not_cancel_it(catalog, client):
    from billing.onboarding import team_create

    owner, payer = make_user(), make_user()
    team = team_create(user=owner, name="Speech lab")
    join(team, owner, payer, role="billing")
    fund_team(team, 1_000_000)
    owner.act_for(team.pk, "owner")
    job = _job_of(owner)
    client.force_login(payer)
    client.post("/teams/switch/", {"team": team.pk})

    page = client.get(f"/console/jobs/{job.id}/")
    refused = client.post(f"/console/jobs/{job.id}/cancel/", follow=True)

    html = page.content.decode()
    assert page.status_code == 200
    assert f'action="/console/jobs/{job.id}/cancel/"' not in html
    assert "Only who submitted this job, an owner or an admin may cancel it." in html
    assert "does not allow ordering or changing resources" in refused.content.decode()
    job.refresh_from_db()
    assert job.status == "provisioning"


def test_a_free_cloud_disk_chosen_in_the_form_goes_with_the_job(catalog, client):
    user = _submitter(client)
    disk = make_disk(user, name="ckpt")
    page = client.get("/console/jobs/new/").content.decode()
    assert f'name="disks" value="{disk.id}"' in page

    answer = _submit(
        client, catalog, token=_token(client.get("/console/jobs/new/")), disks=[disk.id]
    )

    job = Job.objects.get(tenant=user.tenant)
    assert answer.status_code == 302
    assert job.disks == [disk.id]


def test_the_form_says_whose_wallet_pays(catalog, client):
    from billing.onboarding import team_create

    owner = make_user()
    team = team_create(user=owner, name="NLP lab")
    fund(owner, 12_300)
    client.force_login(owner)

    own = client.get("/console/jobs/new/").content.decode()
    client.post("/teams/switch/", {"team": team.pk})
    shared = client.get("/console/jobs/new/").content.decode()

    assert "Charged to: your own wallet (¥133.00)" in own
    assert "Charged to: team NLP lab’s wallet (¥0.00)" in shared


def test_the_list_reads_the_same_queries_for_one_job_or_many(
    catalog, client, django_assert_max_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    user = _submitter(client)
    _job_of(user)
    with CaptureQueriesContext(connection) as one:
        assert client.get("/console/jobs/").status_code == 200
    for _ in range(3):
        _job_of(user)
    with django_assert_max_num_queries(len(one.captured_queries)):
        html = client.get("/console/jobs/").content.decode()
    assert html.count("data-job=") == 4


def test_make_runs_form_offers_the_simulated_trainer_as_a_demo_and_production_does_not(
    catalog, client, settings
):
    _submitter(client)
    settings.JOB_DEMO_COMMAND = ""
    plain = client.get("/console/jobs/new/?demo=1").content.decode()
    assert "data-demo" not in plain and "starverse-sim-train" not in plain

    settings.JOB_DEMO_COMMAND = "starverse-sim-train --steps 300 --step-seconds 1"
    offered = client.get("/console/jobs/new/").content.decode()
    assert 'href="?demo=1" data-demo' in offered
    filled = client.get("/console/jobs/new/?demo=1").content.decode()
    assert ">starverse-sim-train --steps 300 --step-seconds 1</textarea>" in filled
