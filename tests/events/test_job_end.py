"""End to end on the emulator: a job that runs to its end reports job.started then
job.succeeded, and a WeCom-style group bot hears its end in Chinese, with the job's link."""

from events.channels import channel_create
from events.models import Event
from jobs.services import job_sync
from tests.factories import fund, make_user
from tests.jobs.test_jobs import _job, _program_ends, _running, _trainer


def test_a_wecom_bot_hears_in_chinese_that_a_job_ended(
    catalog, client_for, bots, django_capture_on_commit_callbacks
):
    owner = make_user()
    fund(owner, 1_000_000)
    channel_create(
        user=owner,
        kind="wecom",
        target=f"{bots.url}/wecom/send?key=lab",
        events=["job.succeeded", "job.failed"],
        language="zh-hans",
    )
    job = _job(client_for(owner), catalog, name="sft", command=_trainer(3))
    instance = _running(job)
    _program_ends(instance)
    with django_capture_on_commit_callbacks(execute=True):
        assert job_sync(job.id) == "succeeded"
    kinds = Event.objects.filter(tenant_id=owner.tenant_id, data__id=job.id).order_by("created_at")
    assert list(kinds.values_list("type", flat=True)) == ["job.started", "job.succeeded"]
    [heard] = bots.of("wecom")
    assert heard["json"]["text"]["content"] == (
        f"任务 sft 已成功完成。\nhttp://127.0.0.1:8000/console/jobs/{job.id}/"
    )
