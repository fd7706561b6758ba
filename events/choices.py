"""The event types (names fixed by the public contract), delivery states and channel kinds."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class EventType(models.TextChoices):
    INSTANCE_RUNNING = "instance.running", _("Instance running")
    INSTANCE_STOPPED = "instance.stopped", _("Instance stopped")
    INSTANCE_PREEMPTED = "instance.preempted", _("Spot instance taken back")
    INSTANCE_IDLE_WARNING = "instance.idle_warning", _("Instance idle: it will stop")
    INSTANCE_AUTO_STOPPED = "instance.auto_stopped", _("Instance stopped automatically")
    CLUSTER_READY = "cluster.ready", _("Cluster ready")
    CLUSTER_DEGRADED = "cluster.degraded", _("Cluster degraded")
    CLUSTER_RECOVERED = "cluster.recovered", _("Cluster recovered")
    JOB_STARTED = "job.started", _("Job started")
    JOB_RECOVERING = "job.recovering", _("Job recovering")
    JOB_SUCCEEDED = "job.succeeded", _("Job succeeded")
    JOB_FAILED = "job.failed", _("Job failed")
    ENDPOINT_RUNNING = "endpoint.running", _("Endpoint running")
    ENDPOINT_SCALED = "endpoint.scaled", _("Endpoint scaled")
    BALANCE_LOW = "balance.low", _("Balance low")
    BUDGET_REACHED = "budget.reached", _("Budget reached")
    TOPUP_PAID = "topup.paid", _("Top-up paid")
    INVOICE_ISSUED = "invoice.issued", _("Invoice issued")


# Sent by POST /webhooks/{id}/test only, to that one webhook; nobody subscribes to it.
TEST_EVENT = "webhook.test"

# What a new account's e-mail channel is subscribed to: a job's end, the idle warning and the
# stop it announced, a low balance and a spot instance taken back.
EMAIL_DEFAULTS = (
    EventType.JOB_SUCCEEDED,
    EventType.JOB_FAILED,
    EventType.INSTANCE_IDLE_WARNING,
    EventType.INSTANCE_AUTO_STOPPED,
    EventType.BALANCE_LOW,
    EventType.INSTANCE_PREEMPTED,
)


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    RETRYING = "retrying", _("Retrying")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")


class WebhookStatus(models.TextChoices):
    ENABLED = "enabled", _("Enabled")
    DISABLED = "disabled", _("Disabled")


class ChannelKind(models.TextChoices):
    EMAIL = "email", _("E-mail")
    WECOM = "wecom", _("WeCom group bot")
    DINGTALK = "dingtalk", _("DingTalk group bot")
    FEISHU = "feishu", _("Feishu group bot")
