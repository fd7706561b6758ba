"""Webhook deliveries against a local receiver (devstack.chatbots): signed bodies that verify
with the user guide's snippet, the same event id on every retry, backoff (the first retry
within a minute) for a day on timeouts and 5xx, no retry on a 4xx, disabling after a day of
failures with an e-mail, the answer's size cap, fan-out once, and the 30 days' pruning."""

import json
import re
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.db import transaction
from django.utils import timezone

from events import delivery as deliveries
from events.choices import DeliveryStatus, EventType, WebhookStatus
from events.emit import emit
from events.models import Event, NotificationChannel, WebhookDelivery
from events.signing import HEADER, verify
from events.webhooks import webhook_create, webhook_rotate_secret
from tests.events.conftest import behave
from tests.factories import make_user

ROOT = Path(__file__).resolve().parents[2]


def documented_verify(page: str = "docs/user-guide.md") -> Any:
    """The `verify` of the page's snippet, run as a reader would paste it."""
    text = (ROOT / page).read_text()
    found = re.search(r"<!-- webhook-verify -->\n```python\n(.*?)```", text, re.S)
    assert found is not None
    scope: dict[str, Any] = {}
    exec(found.group(1), scope)  # noqa: S102 (the documentation's own code)
    return scope["verify"]


@pytest.fixture
def hooked(bots, db):
    """A person with a webhook on the receiver's /hook/ci for job ends."""
    person = make_user()
    made = webhook_create(
        user=person, url=f"{bots.url}/hook/ci", events=["job.succeeded", "job.failed"]
    )
    return person, made.webhook, made.secret


def _t(value: datetime | None) -> datetime:
    assert value is not None
    return value


def _emit(person, kind=EventType.JOB_FAILED, on_commit=None):
    with on_commit(execute=True), transaction.atomic():
        return emit(person.tenant_id, kind, {"id": "job_x", "name": "train", "url": "/x/"})


def _hooks(bots, name="ci"):
    return [entry for entry in bots.of("hook") if entry["path"] == name]


def test_a_delivery_is_signed_and_verifies_with_the_documented_snippet(
    hooked, bots, django_capture_on_commit_callbacks
):
    person, webhook, secret = hooked
    event_id = _emit(person, on_commit=django_capture_on_commit_callbacks)
    [got] = _hooks(bots)
    body = got["body"].encode()
    assert json.loads(body)["id"] == event_id
    assert json.loads(body)["type"] == "job.failed"
    assert json.loads(body)["data"] == {"id": "job_x", "name": "train", "url": "/x/"}
    header = got["headers"][HEADER]
    assert re.fullmatch(r"t=\d+,v1=[0-9a-f]{64}", header)
    assert documented_verify()(secret, header, body) is True
    assert documented_verify("README.md")(secret, header, body) is True
    assert verify(secret, header, body) is True
    assert documented_verify()(secret, header, body + b" ") is False
    assert documented_verify()("whsec_other", header, body) is False
    [row] = WebhookDelivery.objects.filter(webhook=webhook)
    assert (row.status, row.attempts, row.response_status) == ("succeeded", 1, 200)
    assert row.response_body == '{"ok": true}'


def test_an_old_signature_fails_the_documented_check(hooked, bots):
    _person, _webhook, secret = hooked
    body = b'{"id": "evt_1"}'
    from events.signing import header_value

    old = header_value([secret], int(time.time()) - 3600, body)
    assert documented_verify()(secret, old, body) is False


def test_during_a_rotation_both_secrets_sign_for_a_day(
    hooked, bots, django_capture_on_commit_callbacks
):
    person, webhook, old_secret = hooked
    new_secret = webhook_rotate_secret(user=person, webhook=webhook)
    _emit(person, on_commit=django_capture_on_commit_callbacks)
    [got] = _hooks(bots)
    header, body = got["headers"][HEADER], got["body"].encode()
    assert header.count("v1=") == 2
    check = documented_verify()
    assert check(old_secret, header, body) and check(new_secret, header, body)
    webhook.refresh_from_db()
    later = webhook.previous_secret_expires_at + timedelta(seconds=1)
    assert deliveries.signing_secrets(webhook, later) == [new_secret]


def test_only_subscribed_types_are_delivered(hooked, bots, django_capture_on_commit_callbacks):
    person, webhook, _secret = hooked
    _emit(person, EventType.INSTANCE_RUNNING, on_commit=django_capture_on_commit_callbacks)
    assert _hooks(bots) == []
    assert not WebhookDelivery.objects.filter(webhook=webhook).exists()


def test_an_event_of_a_rolled_back_change_is_never_sent(hooked, bots):
    person, _webhook, _secret = hooked
    with pytest.raises(RuntimeError), transaction.atomic():
        emit(person.tenant_id, EventType.JOB_FAILED, {"id": "job_x"})
        raise RuntimeError("the change failed")
    assert not Event.objects.filter(tenant_id=person.tenant_id).exists()
    assert _hooks(bots) == []


def test_a_5xx_is_retried_with_backoff_and_the_same_event_id(
    hooked, bots, django_capture_on_commit_callbacks
):
    person, webhook, _secret = hooked
    behave(bots, "ci", status=503)
    event_id = _emit(person, on_commit=django_capture_on_commit_callbacks)
    row = WebhookDelivery.objects.get(webhook=webhook)
    assert (row.status, row.attempts, row.response_status) == ("retrying", 1, 503)
    first_wait = _t(row.next_attempt_at) - _t(row.last_attempt_at)
    assert timedelta(seconds=30) <= first_wait < timedelta(minutes=1)
    # not due yet: a sweep or a worker sends nothing
    assert deliveries.deliver(row.id, now=_t(row.last_attempt_at) + timedelta(seconds=10)) is None
    waits = [first_wait]
    for _ in range(3):
        at = row.next_attempt_at
        assert deliveries.deliver(row.id, now=at) == "retrying"
        row.refresh_from_db()
        waits.append(_t(row.next_attempt_at) - _t(at))
    assert waits == sorted(waits) and waits[-1] >= timedelta(minutes=30)
    behave(bots, "ci", status=204, body=b"")
    assert deliveries.deliver(row.id, now=row.next_attempt_at) == "succeeded"
    ids = {json.loads(entry["body"])["id"] for entry in _hooks(bots)}
    assert ids == {event_id} and len(_hooks(bots)) == 5
    webhook.refresh_from_db()
    assert webhook.failing_since is None


def test_a_timeout_is_retried_and_never_holds_the_worker(
    hooked, bots, django_capture_on_commit_callbacks, settings
):
    person, webhook, _secret = hooked
    behave(bots, "ci", delay_s=2.0)
    started = time.monotonic()
    _emit(person, on_commit=django_capture_on_commit_callbacks)
    assert time.monotonic() - started < 1.8
    row = WebhookDelivery.objects.get(webhook=webhook)
    assert (row.status, row.response_status, row.error) == ("retrying", None, "ReadTimeoutError")


def test_a_4xx_fails_at_once(hooked, bots, django_capture_on_commit_callbacks):
    person, webhook, _secret = hooked
    behave(bots, "ci", status=410)
    _emit(person, on_commit=django_capture_on_commit_callbacks)
    row = WebhookDelivery.objects.get(webhook=webhook)
    assert (row.status, row.next_attempt_at, row.error) == ("failed", None, "HTTP 410")


def test_retries_stop_after_a_day(hooked, bots, django_capture_on_commit_callbacks):
    person, webhook, _secret = hooked
    behave(bots, "ci", status=500)
    _emit(person, on_commit=django_capture_on_commit_callbacks)
    row = WebhookDelivery.objects.get(webhook=webhook)
    while row.status == DeliveryStatus.RETRYING:
        deliveries.deliver(row.id, now=row.next_attempt_at)
        row.refresh_from_db()
        assert row.next_attempt_at is None or row.next_attempt_at <= row.created_at + timedelta(
            hours=24
        )
    assert row.status == "failed" and len(_hooks(bots)) == row.attempts
    assert _t(row.last_attempt_at) - row.created_at < timedelta(hours=24)
    # the waits 30 s, 2 min, 10 min, 30 min, 1, 2, 4 and 8 h (and up to 10 % jitter) add up to
    # 15.7 to 17.3 h: one more 8 h wait fits the day or not, by the jitter; the next would not
    next_wait = deliveries.backoff(row.id, row.attempts)
    assert _t(row.last_attempt_at) + next_wait > row.created_at + timedelta(hours=24)
    assert row.attempts in (9, 10)


def test_a_url_failing_for_a_day_is_disabled_and_its_owner_mailed(
    hooked, bots, django_capture_on_commit_callbacks
):
    person, webhook, _secret = hooked
    NotificationChannel.objects.filter(tenant_id=person.tenant_id).update(enabled=False)
    behave(bots, "ci", status=500)
    _emit(person, on_commit=django_capture_on_commit_callbacks)
    webhook.refresh_from_db()
    began = webhook.failing_since
    assert began is not None and webhook.status == "enabled"
    # a second event a day later fails too: the URL has failed for a day
    row = WebhookDelivery.objects.get(webhook=webhook)
    with django_capture_on_commit_callbacks(execute=True):
        deliveries.deliver(row.id, now=row.next_attempt_at)  # still within the day
    webhook.refresh_from_db()
    assert webhook.status == "enabled" and not mail.outbox
    event = Event.objects.create(tenant_id=person.tenant_id, type="job.failed", data={})
    late = WebhookDelivery.objects.create(webhook=webhook, event=event, next_attempt_at=began)
    with django_capture_on_commit_callbacks(execute=True):
        deliveries.deliver(late.id, now=began + timedelta(hours=24, seconds=1))
    webhook.refresh_from_db()
    assert (webhook.status, webhook.disabled_reason) == (WebhookStatus.DISABLED, "failing")
    [sent] = mail.outbox
    assert sent.to == [person.email] and webhook.url in sent.body
    # a disabled webhook gets no new deliveries, and its pending ones fail without a request
    count = len(_hooks(bots))
    _emit(person, on_commit=django_capture_on_commit_callbacks)
    assert len(_hooks(bots)) == count
    assert deliveries.deliver(row.id, now=_t(row.next_attempt_at) + timedelta(days=1)) is None
    row.refresh_from_db()
    assert (row.status, row.error) == ("failed", "webhook disabled")


def test_a_success_ends_the_failure_spell(hooked, bots, django_capture_on_commit_callbacks):
    person, webhook, _secret = hooked
    behave(bots, "ci", status=502)
    _emit(person, on_commit=django_capture_on_commit_callbacks)
    webhook.refresh_from_db()
    assert webhook.failing_since is not None
    behave(bots, "ci", status=200)
    _emit(person, on_commit=django_capture_on_commit_callbacks)
    webhook.refresh_from_db()
    assert webhook.failing_since is None and webhook.status == "enabled"


def test_only_the_first_kilobyte_of_an_answer_is_kept(
    hooked, bots, django_capture_on_commit_callbacks
):
    person, webhook, _secret = hooked
    behave(bots, "ci", body=b"x" * 500_000)
    _emit(person, on_commit=django_capture_on_commit_callbacks)
    row = WebhookDelivery.objects.get(webhook=webhook)
    assert row.status == "succeeded" and row.response_body == "x" * 1024


def test_an_event_fans_out_once(hooked, bots, django_capture_on_commit_callbacks):
    person, webhook, _secret = hooked
    event_id = _emit(person, on_commit=django_capture_on_commit_callbacks)
    Event.objects.filter(pk=event_id).update(fanned_out_at=None)  # as if the task ran twice
    assert deliveries.fan_out(event_id) == 0
    assert WebhookDelivery.objects.filter(webhook=webhook).count() == 1


def test_an_event_whose_fan_out_was_lost_is_fanned_out_by_the_sweep(hooked, bots):
    person, webhook, _secret = hooked
    event = Event.objects.create(tenant_id=person.tenant_id, type="job.failed", data={})
    assert deliveries.fan_out_missed(now=event.created_at + timedelta(seconds=5)) == 0
    assert deliveries.fan_out_missed(now=event.created_at + timedelta(minutes=2)) == 1
    assert WebhookDelivery.objects.filter(webhook=webhook, event=event).count() == 1


def test_deliveries_are_kept_thirty_days(hooked, bots, django_capture_on_commit_callbacks):
    person, webhook, _secret = hooked
    _emit(person, on_commit=django_capture_on_commit_callbacks)
    row = WebhookDelivery.objects.get(webhook=webhook)
    assert deliveries.deliveries_prune(now=row.created_at + timedelta(days=29)) == 0
    assert deliveries.deliveries_prune(now=row.created_at + timedelta(days=31)) == 1
    assert not WebhookDelivery.objects.filter(webhook=webhook).exists()
    assert not Event.objects.filter(tenant_id=person.tenant_id).exists()


def test_the_retry_sweep_sends_only_what_is_due(hooked, bots, django_capture_on_commit_callbacks):
    person, webhook, _secret = hooked
    behave(bots, "ci", status=500)
    _emit(person, on_commit=django_capture_on_commit_callbacks)
    row = WebhookDelivery.objects.get(webhook=webhook)
    assert deliveries.deliveries_due(now=_t(row.next_attempt_at) - timedelta(seconds=1)) == 0
    WebhookDelivery.objects.filter(pk=row.pk).update(next_attempt_at=timezone.now())
    behave(bots, "ci", status=200)
    with django_capture_on_commit_callbacks(execute=True):
        assert deliveries.deliveries_due() == 1
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("succeeded", 2)
