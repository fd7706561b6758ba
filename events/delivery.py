"""Delivering events, in workers only: the fan-out of an event to the tenant's webhooks and
channels that listen to its type, each webhook delivery's attempts (at least once, the same
event id every time, retried with backoff for WEBHOOK_RETRY_HOURS on timeouts, 5xx and lost
connections), the disabling of a URL that failed for as long, and the pruning of old
deliveries."""

import json
import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from events.choices import DeliveryStatus, WebhookStatus
from events.models import Event, NotificationChannel, Webhook, WebhookDelivery
from events.sender import Answer, post
from events.signing import HEADER, header_value
from starverse.accounts.models import User
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.links import public_url
from starverse.core.roles import MANAGERS

logger = logging.getLogger(__name__)
DELIVER_TASK = "events.tasks.deliver"
NOTIFY_TASK = "events.tasks.notify"
DISABLED_MAIL_TASK = "events.tasks.mail_webhook_disabled"
# Seconds before each retry (the last repeats), the first within a minute; a little jitter,
# fixed per delivery, keeps a receiver that comes back from getting every retry at once.
BACKOFF_S = (30, 120, 600, 1800, 3600, 7200, 14400, 28800)
# While an attempt is in flight its delivery is not due again for this long (a sweep would
# otherwise send it twice); an attempt that never records its answer is retried after it.
IN_FLIGHT = timedelta(seconds=120)
# The disabled_reason of a webhook that failed for WEBHOOK_RETRY_HOURS (a code, not prose).
DISABLED_FAILING = "failing"
UNDELIVERED = (DeliveryStatus.PENDING, DeliveryStatus.RETRYING)


def backoff(key: str, attempts: int) -> timedelta:
    """The wait after the `attempts`-th failed attempt: BACKOFF_S plus up to 10 % jitter,
    fixed by `key` (a delivery's id; a channel notice's). Webhooks and chat notices share it."""
    base = BACKOFF_S[min(attempts, len(BACKOFF_S)) - 1]
    jitter = (sum(key.encode()) % 11) / 100
    return timedelta(seconds=base * (1 + jitter))


def fan_out(event_id: str) -> int:
    """Make the event's deliveries, once (the unique key makes a second fan-out add nothing),
    and start them and its channels' notices after commit. Returns the deliveries made."""
    with transaction.atomic():
        event = Event.objects.select_for_update().filter(pk=event_id).first()
        if event is None or event.fanned_out_at is not None:
            return 0
        hooks = Webhook.objects.filter(
            tenant_id=event.tenant_id, status=WebhookStatus.ENABLED, events__contains=[event.type]
        ).values_list("pk", flat=True)
        now = timezone.now()
        had = set(
            WebhookDelivery.objects.filter(event=event, manual=False).values_list("pk", flat=True)
        )
        WebhookDelivery.objects.bulk_create(
            [WebhookDelivery(webhook_id=pk, event=event, next_attempt_at=now) for pk in hooks],
            ignore_conflicts=True,
        )
        event.fanned_out_at = now
        event.save(update_fields=["fanned_out_at"])
        made = [
            delivery_id
            for delivery_id in WebhookDelivery.objects.filter(event=event, manual=False)
            .order_by("pk")
            .values_list("pk", flat=True)
            if delivery_id not in had
        ]
        for delivery_id in made:
            enqueue_on_commit(DELIVER_TASK, delivery_id)
        channels = NotificationChannel.objects.filter(
            tenant_id=event.tenant_id, enabled=True, events__contains=[event.type]
        ).values_list("pk", flat=True)
        for channel_id in channels:
            enqueue_on_commit(NOTIFY_TASK, channel_id, event.id)
    return len(made)


def body_of(event: Event) -> bytes:
    payload = {
        "id": event.id,
        "type": event.type,
        "created": event.created_at.isoformat(),
        "data": event.data,
    }
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def signing_secrets(webhook: Webhook, now: datetime) -> list[str]:
    """The secret, and during a rotation the one it replaced, until that expires."""
    valid = [webhook.secret]
    expires = webhook.previous_secret_expires_at
    if webhook.previous_secret and expires is not None and expires > now:
        valid.append(webhook.previous_secret)
    return valid


def _claim(delivery_id: str, now: datetime) -> WebhookDelivery | None:
    """The delivery, counted as one more attempt and not due again while in flight; None when
    it is gone, done, not due, or its webhook was disabled (a redelivery or test still goes)."""
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .select_related("webhook", "event")
            .filter(pk=delivery_id, status__in=UNDELIVERED)
            .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
            .first()
        )
        if delivery is None:
            return None
        if delivery.webhook.status != WebhookStatus.ENABLED and not delivery.manual:
            delivery.status, delivery.error = DeliveryStatus.FAILED, "webhook disabled"
            delivery.next_attempt_at = None
            delivery.save(update_fields=["status", "error", "next_attempt_at"])
            return None
        delivery.attempts += 1
        delivery.last_attempt_at = now
        delivery.next_attempt_at = now + IN_FLIGHT
        delivery.save(update_fields=["attempts", "last_attempt_at", "next_attempt_at"])
    return delivery


def deliver(delivery_id: str, *, now: datetime | None = None) -> str | None:
    """One attempt of a due delivery: signed, posted by events.sender, its answer recorded.
    Returns the delivery's status after it (None: nothing was due)."""
    now = now or timezone.now()
    delivery = _claim(delivery_id, now)
    if delivery is None:
        return None
    body = body_of(delivery.event)
    timestamp = int(now.timestamp())
    headers = {
        HEADER: header_value(signing_secrets(delivery.webhook, now), timestamp, body),
        "User-Agent": "Starverse-Webhooks/1",
        "Starverse-Event-Id": delivery.event_id,
    }
    answer = post(delivery.webhook.url, body, headers)
    return _record(delivery, answer, now)


def _record(delivery: WebhookDelivery, answer: Answer, now: datetime) -> str:
    with transaction.atomic():
        delivery.response_status = answer.status
        delivery.response_body = answer.body
        delivery.duration_ms = answer.duration_ms
        delivery.error = answer.error[:300]
        retry_until = delivery.created_at + timedelta(hours=settings.WEBHOOK_RETRY_HOURS)
        if answer.ok:
            delivery.status, delivery.next_attempt_at = DeliveryStatus.SUCCEEDED, None
        elif answer.retryable and now + backoff(delivery.id, delivery.attempts) <= retry_until:
            delivery.status = DeliveryStatus.RETRYING
            delivery.next_attempt_at = now + backoff(delivery.id, delivery.attempts)
        else:
            delivery.status, delivery.next_attempt_at = DeliveryStatus.FAILED, None
        delivery.save(
            update_fields=[
                "status",
                "next_attempt_at",
                "response_status",
                "response_body",
                "duration_ms",
                "error",
            ]
        )
        _webhook_health(delivery.webhook_id, answer.ok, now)
    logger.info(
        "webhook.attempt delivery=%s webhook=%s event=%s attempt=%s status=%s http=%s ms=%s",
        delivery.id,
        delivery.webhook_id,
        delivery.event_id,
        delivery.attempts,
        delivery.status,
        answer.status,
        answer.duration_ms,
    )
    return delivery.status


def _webhook_health(webhook_id: str, ok: bool, now: datetime) -> None:
    """A success ends the failure spell; a failure starts one, and one that has lasted
    WEBHOOK_RETRY_HOURS disables the webhook (once: the update is conditional) and mails its
    owners."""
    hooks = Webhook.objects.filter(pk=webhook_id)
    if ok:
        hooks.exclude(failing_since=None).update(failing_since=None)
        return
    hooks.filter(failing_since=None).update(failing_since=now)
    since = now - timedelta(hours=settings.WEBHOOK_RETRY_HOURS)
    disabled = hooks.filter(status=WebhookStatus.ENABLED, failing_since__lte=since).update(
        status=WebhookStatus.DISABLED,
        disabled_reason=DISABLED_FAILING,
    )
    if disabled:
        logger.warning("webhook.disabled webhook=%s", webhook_id)
        enqueue_on_commit(DISABLED_MAIL_TASK, webhook_id)


def webhook_disabled_mail(webhook_id: str) -> None:
    """Tell whoever registered the webhook, and the team's owners and admins, in the language
    it was registered in, that it was disabled and how to enable it again."""
    webhook = Webhook.objects.filter(pk=webhook_id).first()
    if webhook is None:
        return
    people = Q(memberships__tenant_id=webhook.tenant_id, memberships__role__in=MANAGERS)
    if webhook.created_by_id:
        people |= Q(pk=webhook.created_by_id)
    recipients = list(
        User.objects.filter(people, is_active=True).values_list("email", flat=True).distinct()
    )
    with translation.override(webhook.language):
        subject = _("Starverse: your webhook was disabled")
        body = _(
            "Deliveries to %(url)s have failed for %(hours)s hours, so the webhook is disabled "
            "and receives no more events. Fix the receiver, then enable the webhook again on "
            "the Webhooks page: %(link)s"
        ) % {
            "url": webhook.url,
            "hours": settings.WEBHOOK_RETRY_HOURS,
            "link": public_url("/console/webhooks/"),
        }
    if recipients:
        send_mail(subject, body, None, recipients)


def deliveries_due(*, now: datetime | None = None, limit: int = 500) -> int:
    """Start every delivery whose next attempt is due (the beat's retries). Returns how many."""
    now = now or timezone.now()
    due = list(
        WebhookDelivery.objects.filter(status__in=UNDELIVERED, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    for delivery_id in due:
        enqueue_on_commit(DELIVER_TASK, delivery_id)
    return len(due)


def fan_out_missed(*, now: datetime | None = None) -> int:
    """Fan out the events a minute old and still not fanned out (the broker lost the task)."""
    now = now or timezone.now()
    missed = list(
        Event.objects.filter(fanned_out_at=None, created_at__lte=now - timedelta(minutes=1))
        .order_by("created_at")
        .values_list("pk", flat=True)[:500]
    )
    return sum(fan_out(event_id) for event_id in missed)


def deliveries_prune(*, now: datetime | None = None) -> int:
    """Delete deliveries, and events, older than WEBHOOK_DELIVERY_DAYS."""
    now = now or timezone.now()
    before = now - timedelta(days=settings.WEBHOOK_DELIVERY_DAYS)
    deleted, _rows = WebhookDelivery.objects.filter(created_at__lt=before).delete()
    Event.objects.filter(created_at__lt=before).delete()
    return deleted
