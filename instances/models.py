from typing import Any

from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower
from django.utils import timezone

from compute.choices import BillingMode
from compute.models import Image, Offering
from fleet.models import Node
from instances.choices import AutoStopKind, InstanceStatus
from starverse.core.ids import PublicIdField
from starverse.core.text import Deferred, parts, translate_stored


class Instance(models.Model):
    """A rental: an offering and an image for a tenant, placed on one node. Its status changes
    only through the state machine (instances.states), which writes an InstanceEvent."""

    id = PublicIdField(prefix="ins")
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="instances"
    )
    created_by = models.ForeignKey("accounts.User", on_delete=models.PROTECT, related_name="+")
    # Its GPU holding (the compute core's row of the same id, enforced by the database:
    # compute migration 0002), as a relation without a column of its own, for queries that
    # cross from one to the other.
    holding = models.ForeignObject(
        "compute.Holding",
        on_delete=models.DO_NOTHING,
        from_fields=["id"],
        to_fields=["id"],
        related_name="+",
        related_query_name="instance",
    )
    name = models.CharField(max_length=100)
    offering = models.ForeignKey(Offering, on_delete=models.PROTECT, related_name="+")
    image = models.ForeignKey(Image, on_delete=models.PROTECT, related_name="+")
    billing = models.CharField(
        max_length=16, choices=BillingMode.choices, default=BillingMode.HOURLY
    )
    status = models.CharField(
        max_length=16, choices=InstanceStatus.choices, default=InstanceStatus.QUEUED, db_index=True
    )
    error_message = models.TextField(blank=True)
    node = models.ForeignKey(
        Node, null=True, blank=True, on_delete=models.PROTECT, related_name="instances"
    )
    region = models.ForeignKey(
        "fleet.Region",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Where it runs: the order's choice (null: any), then its first node's region, "
        "kept for good (its own disk lives in that cluster).",
    )
    idempotency_key = models.CharField(max_length=200, blank=True)
    request_hash = models.CharField(max_length=64, blank=True)
    running_since = models.DateTimeField(null=True, blank=True)
    session = models.PositiveIntegerField(default=0, help_text="Billing session, +1 per start.")
    k8s_namespace = models.CharField(max_length=63, blank=True)
    k8s_name = models.CharField(max_length=63, blank=True)
    ssh_port = models.PositiveIntegerField(null=True, blank=True)
    jupyter_port = models.PositiveIntegerField(null=True, blank=True)
    jupyter_token = models.CharField(max_length=64, blank=True)
    # The instance's SSH host key, made once by the platform (starverse.core.hostkeys). The
    # private half is kept here, not only in the cluster's Secret, because the database is the
    # desired state: the Secret is rendered again on every start and key change, in whatever
    # namespace and on whatever node, and must carry the same key so the host stays the one the
    # user's known_hosts has.
    ssh_host_key = models.TextField(blank=True)
    ssh_host_key_fingerprint = models.CharField(
        max_length=64, blank=True, help_text="SHA256 fingerprint of the SSH host key."
    )
    provisioning_since = models.DateTimeField(
        null=True, blank=True, help_text="When this provisioning began (its timeout runs from it)."
    )
    objects_created_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When this provisioning's objects were created on the cluster; until then "
        "they are created, after it the pod is only watched.",
    )
    events_read_at = models.DateTimeField(
        null=True, blank=True, help_text="When the pod's Kubernetes events were last read."
    )
    seen_event_uids = models.JSONField(default=list, blank=True)
    paid_until = models.DateTimeField(null=True, blank=True, help_text="Monthly: prepaid until.")
    monthly_period = models.PositiveIntegerField(default=0, help_text="Monthly: periods paid.")
    auto_renew = models.BooleanField(default=True, help_text="Monthly: renew at period end.")
    ssh_key_ids = models.JSONField(
        default=list, blank=True, help_text="Keys to install; empty = every key of the tenant."
    )
    cost_fen = models.BigIntegerField(default=0)
    auto_recover = models.BooleanField(
        default=False,
        help_text="On node loss, place again on a healthy node with the same disks.",
    )
    restart_pending = models.BooleanField(
        default=False, help_text="Start again once stopped (disks were attached or detached)."
    )
    keep_disk = models.BooleanField(
        default=False, help_text="On terminate, keep the instance's own disk as a cloud disk."
    )
    ports = models.JSONField(
        default=list,
        blank=True,
        help_text="HTTP ports served through the gateway besides Jupyter's (instances.gateway).",
    )
    # Idle auto-stop (instances.autostop): stop once every GPU has been below
    # idle_stop_util_pct % for idle_stop_minutes; both null = off. The warning goes
    # idle_warn_minutes before; idle time counts from idle_counted_from at the earliest.
    idle_stop_util_pct = models.PositiveSmallIntegerField(null=True, blank=True)
    idle_stop_minutes = models.PositiveSmallIntegerField(null=True, blank=True)
    idle_warn_minutes = models.PositiveSmallIntegerField(default=10)
    idle_counted_from = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Idle time counts from here at the earliest: the last Keep running, or the "
        "last change of the idle stop.",
    )
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    idle_stop_due_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Warned: it stops at this time if it stays idle (the console's banner).",
    )
    stop_at = models.DateTimeField(
        null=True, blank=True, help_text="A scheduled stop (the user's, or the order's hours)."
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    terminated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="instance_idempotency_key",
            ),
            # Gateway addresses carry the id in lower case (host names have no case): one
            # instance per lower-cased id, found through this index.
            models.UniqueConstraint(Lower("id"), name="instance_id_lower"),
            models.CheckConstraint(
                condition=Q(idle_stop_util_pct__isnull=True, idle_stop_minutes__isnull=True)
                | Q(idle_stop_util_pct__isnull=False, idle_stop_minutes__isnull=False),
                name="instance_idle_stop_whole",
            ),
        ]
        indexes = [
            # the schedule's beat task reads only the few instances with a stop scheduled
            models.Index(
                fields=["stop_at"], condition=Q(stop_at__isnull=False), name="instance_stop_at"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.name}"


class PortShare(models.Model):
    """A link that opens one port of one instance through the gateway to whoever holds it,
    without a console account; it works until its owner revokes it or the port goes. Only the
    SHA-256 of its token is stored: the link is shown once."""

    id = PublicIdField(prefix="shr")
    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="shares")
    port = models.PositiveIntegerField()
    token_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey("accounts.User", on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["port", "created_at"]
        indexes = [models.Index(fields=["instance", "port"], name="portshare_instance_port")]

    def __str__(self) -> str:
        return f"{self.id} {self.instance_id}:{self.port}"


class InstanceEvent(models.Model):
    """A step of an instance's life, shown to the user as progress."""

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=16, choices=InstanceStatus.choices)
    message = models.TextField(help_text="In its source language; see `text`.")
    params = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # A message made with starverse.core.text.later is stored as its source and parameters.
        if isinstance(kwargs.get("message"), Deferred):
            kwargs["message"], kwargs["params"] = parts(kwargs["message"])
        super().__init__(*args, **kwargs)

    def __str__(self) -> str:
        return f"{self.instance_id} {self.status}"

    @property
    def text(self) -> str:
        """The message in the active language."""
        return translate_stored(self.message, self.params)


class AutoStop(models.Model):
    """The platform stopped an instance on its owner's behalf: idle (every GPU below the
    threshold for the set time) or at its scheduled time. `price_per_hour_fen` is what a
    running hour of it cost then (0 for a monthly rental in its paid month: stopping it saves
    nothing); the money it saved is read from it (instances.autostop.auto_stop_savings)."""

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="auto_stops")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16, choices=AutoStopKind.choices)
    at = models.DateTimeField(default=timezone.now)
    price_per_hour_fen = models.BigIntegerField()

    class Meta:
        ordering = ["-at"]
        indexes = [models.Index(fields=["tenant", "at"], name="autostop_tenant_at")]

    def __str__(self) -> str:
        return f"{self.instance_id} {self.kind}@{self.at}"
