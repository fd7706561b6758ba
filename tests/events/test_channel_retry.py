"""Chat notices retry like webhooks: a passing failure (a 5xx, no answer, the service's busy or
rate-limit code) is tried again on delivery.BACKOFF_S's schedule, NOTIFY_TRIES times in all; a
refusal is kept at once; a notice sent is never sent again, even by a redelivered task."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from events import channels
from events.channels import NOTIFY_TASK, NOTIFY_TRIES, channel_create
from events.choices import EventType
from events.delivery import BACKOFF_S
from events.emit import emit
from events.models import ChannelNotice, Event
from tests.events.conftest import behave
from tests.factories import make_user

JOB = {"id": "job_abc", "name": "llama-sft", "status": "succeeded", "url": "/console/jobs/job_abc/"}


def _wecom(bots, key):
    person = make_user()
    channel = channel_create(
        user=person,
        kind="wecom",
        target=f"{bots.url}/wecom/send?key={key}",
        events=["job.succeeded"],
        language="zh-hans",
    )
    return person, channel


def _event(person):
    return Event.objects.create(
        tenant_id=person.tenant_id,
        type=EventType.JOB_SUCCEEDED,
        data=JOB,
        fanned_out_at=timezone.now(),
    )


def test_a_bot_failing_twice_with_500_gets_the_message_once(
    bots, db, django_capture_on_commit_callbacks
):
    person, channel = _wecom(bots, "flaky")
    behave(bots, "flaky", status=500, body=b'{"errcode": -1, "errmsg": "busy"}', times=2)
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        emit(person.tenant_id, EventType.JOB_SUCCEEDED, JOB)
    [got] = bots.of("wecom")
    assert got["json"]["text"]["content"].startswith("任务 llama-sft")
    [notice] = ChannelNotice.objects.filter(channel=channel)
    assert notice.attempts == 3 and notice.sent_at is not None and notice.error == ""
    channel.refresh_from_db()
    assert channel.last_error == ""


def test_a_redelivered_task_does_not_send_again(bots, db, django_capture_on_commit_callbacks):
    person, channel = _wecom(bots, "once")
    event = _event(person)
    assert channels.notify(channel.id, event.id) == ""
    assert channels.notify(channel.id, event.id) == ""
    assert len(bots.of("wecom")) == 1
    assert ChannelNotice.objects.get(channel=channel).attempts == 1


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, b'{"errcode": 93000, "errmsg": "invalid webhook url"}'),
        (404, b'{"errcode": 404, "errmsg": "no such bot"}'),
    ],
)
def test_a_refusal_is_not_retried(bots, db, django_capture_on_commit_callbacks, status, body):
    person, channel = _wecom(bots, "badkey")
    behave(bots, "badkey", status=status, body=body)
    event = _event(person)
    with django_capture_on_commit_callbacks(execute=False) as started:
        error = channels.notify(channel.id, event.id)
    assert started == []
    assert error.startswith("Refused, not retried (check the bot's URL and key): ")
    notice = ChannelNotice.objects.get(channel=channel)
    assert notice.given_up and notice.attempts == 1 and notice.sent_at is None
    channel.refresh_from_db()
    assert channel.last_error == error
    assert channels.notify(channel.id, event.id) == ""  # a redelivered task: nothing more
    assert ChannelNotice.objects.get(channel=channel).attempts == 1


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (503, b"down"),
        (429, b"slow down"),
        (200, b'{"errcode": 45009, "errmsg": "api freq out of limit"}'),
    ],
)
def test_the_backoff_schedule_is_the_webhooks_one(
    bots, db, django_capture_on_commit_callbacks, status, body
):
    person, channel = _wecom(bots, "down")
    behave(bots, "down", status=status, body=body)
    event = _event(person)
    jitter = (sum(f"{channel.id}:{event.id}".encode()) % 11) / 100
    waits = []
    for _attempt in range(NOTIFY_TRIES):
        with django_capture_on_commit_callbacks(execute=False) as started:
            error = channels.notify(channel.id, event.id)
        assert error
        waits += [(callback.args[0], callback.args[1], callback.args[2]) for callback in started]
    expected = [
        timedelta(seconds=b * (1 + jitter)).total_seconds() for b in BACKOFF_S[: NOTIFY_TRIES - 1]
    ]
    assert waits == [(NOTIFY_TASK, (channel.id, event.id), wait) for wait in expected]
    assert expected[0] < 60 and sum(expected) < 3600
    notice = ChannelNotice.objects.get(channel=channel)
    assert notice.given_up and notice.attempts == NOTIFY_TRIES
    channel.refresh_from_db()
    assert channel.last_error.startswith(f"Gave up after {NOTIFY_TRIES} tries: ")
    assert bots.of("wecom") == []
