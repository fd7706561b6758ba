"""Events and where they go: the event a product reported (`Event`, written in the transaction
that made the change), the tenant's webhooks and each attempt to deliver an event to one
(`Webhook`, `WebhookDelivery`), and the chat and e-mail channels that hear about events
(`NotificationChannel`) with each event told to one (`ChannelNotice`)."""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from events.choices import ChannelKind, DeliveryStatus, WebhookStatus
from starverse.core.ids import PublicIdField


class Event(models.Model):
    """One thing that happened to a tenant's resource, e.g. `job.failed`. Its id is the `id` of
    every delivery of it, retries and redeliveries alike, so a receiver can drop repeats.
    `fanned_out_at` is set once its deliveries exist (a sweep fans out any the broker lost)."""

    id = PublicIdField(prefix="evt")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="+")
    type = models.CharField(max_length=64)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    fanned_out_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["created_at"],
                condition=Q(fanned_out_at__isnull=True),
                name="events_event_unfanned",
            )
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"


class Webhook(models.Model):
    """A URL that receives the tenant's events of the listed types, signed with `secret`. During
    a rotation `previous_secret` signs too, until `previous_secret_expires_at`. A URL that has
    failed since `failing_since` for a day is disabled (`status`), its owner told by e-mail."""

    id = PublicIdField(prefix="wh")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="+")
    created_by = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    url = models.URLField(max_length=2000)
    events = models.JSONField(default=list)
    description = models.CharField(max_length=200, blank=True)
    secret = models.CharField(max_length=64)
    previous_secret = models.CharField(max_length=64, blank=True)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=WebhookStatus.choices, default=WebhookStatus.ENABLED
    )
    disabled_reason = models.CharField(max_length=300, blank=True)
    failing_since = models.DateTimeField(null=True, blank=True)
    language = models.CharField(max_length=16, default="zh-hans")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    """One event sent to one webhook, with its attempts: the last answer's status, how long it
    took and its first bytes. One per webhook and event from the fan-out (unique), plus one per
    redelivery or test. Kept 30 days."""

    id = PublicIdField(prefix="whd")
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="+")
    manual = models.BooleanField(default=False, help_text="A redelivery or a test.")
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True)
    error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["webhook", "event"],
                condition=Q(manual=False),
                name="events_delivery_once_per_event",
            )
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status__in=["pending", "retrying"]),
                name="events_delivery_due",
            )
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"


class NotificationChannel(models.Model):
    """Where a person or a team hears about events in words: an e-mail address or a WeCom,
    DingTalk or Feishu group bot's URL (with the bot's signing secret for DingTalk and Feishu),
    in `language`, for the listed event types."""

    id = PublicIdField(prefix="nch")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="+")
    created_by = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    target = models.CharField(max_length=2000, help_text="An e-mail address or a bot's URL.")
    secret = models.CharField(max_length=200, blank=True)
    events = models.JSONField(default=list)
    language = models.CharField(max_length=16, default="zh-hans")
    enabled = models.BooleanField(default=True)
    last_sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"


class ChannelNotice(models.Model):
    """One event told to one channel: its attempts and, once a bot took it, when (`sent_at`,
    kept before the task is acknowledged, so a task redelivered after a worker died sends
    nothing twice), or why it was given up (`error`)."""

    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE, related_name="+")
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="+")
    attempts = models.PositiveIntegerField(default=0, db_default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    given_up = models.BooleanField(default=False, db_default=False)
    error = models.CharField(max_length=300, blank=True, default="", db_default="")
    created_at = models.DateTimeField(default=timezone.now, db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["channel", "event"], name="channel_notice_once")
        ]

    def __str__(self) -> str:
        return f"{self.channel_id} {self.event_id}"
