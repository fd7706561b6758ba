"""Notification channels: a WeCom-style bot gets a short Chinese line with the job's link when
a job ends, DingTalk's and Feishu's signatures are what their services check, a refusal is kept
on the channel, e-mail channels hear the defaults, and a team's channels are its admins'."""

import pytest
from django.core import mail
from django.db import transaction

from billing.onboarding import team_create
from events.channels import channel_create
from events.choices import EMAIL_DEFAULTS, EventType
from events.emit import emit
from events.models import NotificationChannel
from starverse.core.errors import FieldInvalid, Forbidden
from tests.events.conftest import BOT_SECRET
from tests.factories import make_user
from tests.teams.test_team_changes import acting
from tests.teams.test_teams import join

JOB = {"id": "job_abc", "name": "llama-sft", "status": "succeeded", "url": "/console/jobs/job_abc/"}


def _emit(person, kind, data, on_commit):
    with on_commit(execute=True), transaction.atomic():
        emit(person.tenant_id, kind, data)


def test_a_wecom_bot_gets_a_chinese_line_when_a_job_ends(
    bots, db, django_capture_on_commit_callbacks, settings
):
    settings.PUBLIC_BASE_URL = "https://console.example.cn"
    person = make_user()
    channel = channel_create(
        user=person,
        kind="wecom",
        target=f"{bots.url}/wecom/send?key=abc",
        events=["job.succeeded", "job.failed"],
        language="zh-hans",
    )
    _emit(person, EventType.JOB_SUCCEEDED, JOB, django_capture_on_commit_callbacks)
    [got] = bots.of("wecom")
    assert got["query"] == {"key": "abc"}
    assert got["json"] == {
        "msgtype": "text",
        "text": {
            "content": "任务 llama-sft 已成功完成。\nhttps://console.example.cn/console/jobs/job_abc/"
        },
    }
    channel.refresh_from_db()
    assert channel.last_error == "" and channel.last_sent_at is not None


def test_an_english_reader_reads_english(bots, db, django_capture_on_commit_callbacks):
    person = make_user()
    channel_create(user=person, kind="wecom", target=f"{bots.url}/wecom/send?key=k", language="en")
    _emit(person, EventType.JOB_FAILED, JOB, django_capture_on_commit_callbacks)
    [got] = bots.of("wecom")
    assert got["json"]["text"]["content"].startswith("Job llama-sft failed.\n")


@pytest.mark.parametrize("kind", ["dingtalk", "feishu"])
def test_signed_bots_get_the_signature_their_service_checks(
    kind, bots, db, django_capture_on_commit_callbacks
):
    person = make_user()
    path = "/dingtalk/robot/send?access_token=t" if kind == "dingtalk" else "/feishu/hook/t"
    good = channel_create(
        user=person, kind=kind, target=f"{bots.url}{path}", secret=BOT_SECRET, language="zh-hans"
    )
    bad = channel_create(
        user=person, kind=kind, target=f"{bots.url}{path}", secret="SECwrong", language="zh-hans"
    )
    _emit(
        person,
        EventType.BALANCE_LOW,
        {"balance": "¥3.00", "runway_minutes": 7, "url": "/billing/"},
        django_capture_on_commit_callbacks,
    )
    [got] = bots.of(kind)
    text = got["json"]["text"]["content"] if kind == "dingtalk" else got["json"]["content"]["text"]
    assert text.startswith("余额不足：还剩 ¥3.00，按当前花费约可用 7 分钟。")
    good.refresh_from_db()
    bad.refresh_from_db()
    assert good.last_error == ""
    code = "310000:" if kind == "dingtalk" else "19021:"
    assert bad.last_error.startswith(f"Refused, not retried (check the bot's URL and key): {code}")


def test_an_email_channel_hears_the_defaults_in_its_language(
    bots, db, django_capture_on_commit_callbacks
):
    person = make_user()
    NotificationChannel.objects.filter(tenant_id=person.tenant_id).delete()  # the default one
    channel = channel_create(user=person, kind="email", language="en")
    assert (channel.target, channel.events) == (person.email, list(EMAIL_DEFAULTS))
    _emit(person, EventType.INSTANCE_RUNNING, {"id": "ins_1"}, django_capture_on_commit_callbacks)
    assert mail.outbox == []
    _emit(
        person,
        EventType.INSTANCE_PREEMPTED,
        {"id": "ins_1", "name": "dev", "url": "/console/instances/ins_1/"},
        django_capture_on_commit_callbacks,
    )
    [sent] = mail.outbox
    assert sent.to == [person.email]
    assert sent.subject == "Spot instance dev was taken back."
    assert sent.body.endswith("/console/instances/ins_1/")


def test_a_bot_url_on_an_internal_address_is_refused(db, settings):
    settings.WEBHOOK_ALLOWED_CIDRS = []
    with pytest.raises(FieldInvalid) as refused:
        channel_create(user=make_user(), kind="feishu", target="http://10.0.0.5/hook")
    assert refused.value.field == "target"
    assert not NotificationChannel.objects.filter(kind="feishu").exists()


def test_a_teams_channels_are_its_admins(bots, db):
    owner, member = make_user(), make_user()
    team = team_create(user=owner, name="Lab")
    join(team, owner, member)
    with pytest.raises(Forbidden):
        channel_create(
            user=acting(member, team, "member"), kind="wecom", target=f"{bots.url}/wecom/send"
        )
    made = channel_create(
        user=acting(owner, team, "owner"), kind="wecom", target=f"{bots.url}/wecom/send"
    )
    assert (
        made.tenant_id == team.pk and NotificationChannel.objects.filter(kind="wecom").count() == 1
    )


def test_channels_through_the_api(bots, client_for, django_capture_on_commit_callbacks):
    person = make_user()
    client = client_for(person)
    made = client.post(
        "/api/v1/notification-channels",
        {"kind": "wecom", "target": f"{bots.url}/wecom/send?key=z", "events": ["job.failed"]},
        format="json",
    )
    assert made.status_code == 201 and made.json()["signed"] is False
    with django_capture_on_commit_callbacks(execute=True):
        tested = client.post(f"/api/v1/notification-channels/{made.json()['id']}/test")
    assert tested.status_code == 202 and len(bots.of("wecom")) == 1
    stranger = client_for(make_user())
    assert stranger.get(f"/api/v1/notification-channels/{made.json()['id']}").status_code == 404
    assert client.delete(f"/api/v1/notification-channels/{made.json()['id']}").status_code == 204
