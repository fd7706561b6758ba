from collections.abc import Iterable
from typing import Any

from django.db import models, transaction
from django.db.models import Q
from django.db.models.functions import Lower
from django.utils import timezone

from compute.choices import BillingMode
from compute.models import Image, Offering
from fleet.models import Node
from instances import timeline
from instances.choices import AutoStopKind, InstanceStatus
from starverse.core.ids import PublicIdField
from starverse.core.text import StoredMessage


class InstanceQuerySet(models.QuerySet["Instance"]):
    def bulk_create(
        self, objs: Iterable["Instance"], *args: Any, **kwargs: Any
    ) -> list["Instance"]:
        """Instances inserted together, each with its companion rows (companions_new) in the
        same transaction, so that no instance is ever without its stop policy and pod watch."""
        with transaction.atomic(using=self.db, savepoint=False):
            made = super().bulk_create(objs, *args, **kwargs)
            rows = [row for instance in made for row in companions_new(instance)]
            models_of: tuple[type[models.Model], ...] = (StopPolicy, PodWatch, MonthlyRental)
            for model in models_of:
                model._default_manager.using(self.db).bulk_create(
                    [row for row in rows if type(row) is model]
                )
        return made


class Instance(models.Model):
    """A rental: an offering and an image for a tenant, placed on one node. Its status changes
    only through the state machine (instances.states), which writes an InstanceEvent. Three
    concerns live in rows of their own, one to one: its idle and scheduled stops (StopPolicy,
    `stop_policy`) and its provisioning's bookkeeping (PodWatch, `pod_watch`), which every
    instance has from its insert on, and a monthly rental's period (MonthlyRental, `monthly`,
    read through `rental`), which only a monthly-billed instance has."""

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
    mirrors = models.BooleanField(
        default=True,
        db_default=True,
        help_text="Give its container the operator's academic mirrors (instances.mirrors).",
    )
    ports = models.JSONField(
        default=list,
        blank=True,
        help_text="HTTP ports served through the gateway besides Jupyter's (instances.gateway).",
    )
    cloned_from = models.CharField(
        max_length=32,
        blank=True,
        default="",
        db_default="",
        help_text="The instance it is a clone of (instances.clones): its first start restores "
        "its system disk and own disk from snapshots of that instance's; blank otherwise.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    terminated_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(
        max_length=16,
        blank=True,
        default="",
        db_default="",
        help_text='Why it last stopped when the platform stopped it: "preempted" (a spot '
        "rental taken back for a paying order); blank otherwise, and again once it starts.",
    )

    objects = InstanceQuerySet.as_manager()

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
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.name}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """A new instance is inserted with its companion rows, in one transaction (the order
        path inserts them itself: instances.states.instance_create)."""
        if not self._state.adding:
            super().save(*args, **kwargs)
            return
        with transaction.atomic(using=kwargs.get("using")):
            super().save(*args, **kwargs)
            for row in companions_new(self):
                row.save(force_insert=True, using=kwargs.get("using"))

    @property
    def rental(self) -> "MonthlyRental | None":
        """Its monthly rental, or None for an instance never billed monthly: the one place that
        reads the optional row, so an hourly instance's readers never meet DoesNotExist."""
        try:
            return self.monthly
        except MonthlyRental.DoesNotExist:
            return None


class MonthlyRental(models.Model):
    """A monthly (包月) rental's prepaid periods (instances.monthly, instances.charges): a row
    for each instance ordered monthly, kept when its rental ends and it is billed hourly."""

    instance = models.OneToOneField(
        Instance, primary_key=True, on_delete=models.CASCADE, related_name="monthly"
    )
    paid_until = models.DateTimeField(null=True, blank=True, help_text="Monthly: prepaid until.")
    monthly_period = models.PositiveIntegerField(default=0, help_text="Monthly: periods paid.")
    auto_renew = models.BooleanField(default=True, help_text="Monthly: renew at period end.")

    def __str__(self) -> str:
        return f"{self.instance_id} until {self.paid_until}"


class StopPolicy(models.Model):
    """When an instance stops itself (instances.schedules sets it, instances.autostop carries it
    out): idle auto-stop once every GPU has been below idle_stop_util_pct % for
    idle_stop_minutes (both null: off), warned idle_warn_minutes before, idle time counted from
    idle_counted_from at the earliest; and a scheduled stop at stop_at. Every instance has one."""

    instance = models.OneToOneField(
        Instance, primary_key=True, on_delete=models.CASCADE, related_name="stop_policy"
    )
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

    class Meta:
        verbose_name_plural = "stop policies"
        constraints = [
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
        return f"{self.instance_id} stops"


class PodWatch(models.Model):
    """An instance's provisioning as the reconcile loop tracks it on the cluster
    (instances.provisioning.converge): when this provisioning began (its timeout runs from it),
    whether its objects exist yet, and which of its pod's Kubernetes events are on its
    timeline. Every instance has one; each provisioning starts it afresh (instances.states)."""

    instance = models.OneToOneField(
        Instance, primary_key=True, on_delete=models.CASCADE, related_name="pod_watch"
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
    pod_uid = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text="The uid of this provisioning's pod once it was read: only that pod's "
        "Kubernetes events join the timeline (a pod of the same name before a restart is "
        "another pod).",
    )
    seen_event_uids = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name_plural = "pod watches"

    def __str__(self) -> str:
        return f"{self.instance_id} pod watch"


class Workload(models.Model):
    """A program the instance runs to its end (a job's command), instead of serving until it is
    stopped: its pod runs the program under the image's init (`starverse-init -- PROGRAM`), is
    never restarted by the kubelet, and when the program exits the instance stops, billed to
    the minute the program ended (instances.states.instance_workload_ended). What happens next
    (run it again, or end) is its owner's (the jobs app): the instances app only runs it and
    reports how it ended (instances.signals.workload_ended)."""

    instance = models.OneToOneField(
        Instance, on_delete=models.CASCADE, primary_key=True, related_name="workload"
    )
    owner = models.CharField(
        max_length=32, blank=True, help_text="What runs it (a job's id): it alone acts on it."
    )
    argv = models.JSONField(help_text="The program and its arguments.")
    env = models.JSONField(default=dict, blank=True, help_text="Variables added to the pod's.")
    labels = models.JSONField(default=dict, blank=True, help_text="Labels added to the pod's.")
    # How many pods ran it before the one being made: the program reads it as
    # STARVERSE_RESTART_COUNT (each provisioning makes one pod; instances.provisioning.converge)
    pods_made = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    message = models.TextField(
        blank=True, help_text="The container's termination message: its last lines of output."
    )

    def __str__(self) -> str:
        return f"{self.instance_id} workload"


class WorkloadLog(models.Model):
    """The output of one pod of a program run to its end (its last WORKLOAD_LOG_BYTES), shipped
    from the cluster by the worker every few seconds while the pod runs and once more when it
    is deleted (instances.provisioning.logs): the web tier, which has no cluster credentials,
    reads logs here, and they outlive their pods. `attempt` is the pod's
    STARVERSE_RESTART_COUNT."""

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="logs")
    attempt = models.PositiveIntegerField()
    text = models.TextField(blank=True)
    truncated = models.BooleanField(default=False, help_text="Earlier output was cut off.")
    # the kubelet's time of the last line shipped (RFC 3339, nanoseconds): the next read asks
    # from its second and drops the lines up to it
    read_to = models.CharField(max_length=40, blank=True)
    complete = models.BooleanField(default=False, help_text="Its pod is gone: no more comes.")
    captured_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["instance", "attempt"]
        constraints = [
            models.UniqueConstraint(fields=["instance", "attempt"], name="workloadlog_attempt")
        ]

    def __str__(self) -> str:
        return f"{self.instance_id} log {self.attempt}"


def companions_new(instance: Instance) -> list[models.Model]:
    """The rows a new instance is inserted with: those its creator attached to it (an order
    sets its stops: `instance.stop_policy = StopPolicy(...)`), else ones with the defaults; a
    MonthlyRental only for a monthly-billed one. Each is cached on the instance, so reading
    `instance.stop_policy` after the insert costs no query."""
    cache = instance._state.fields_cache
    rows: list[models.Model] = [
        cache.get("stop_policy") or StopPolicy(instance=instance),
        cache.get("pod_watch") or PodWatch(instance=instance),
    ]
    if (workload := cache.get("workload")) is not None:
        rows.append(workload)
    rental = cache.get("monthly")
    if rental is None and instance.billing == BillingMode.MONTHLY:
        rental = MonthlyRental(instance=instance)
    return rows if rental is None else [*rows, rental]


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


class InstanceEvent(StoredMessage):
    """A step of an instance's life, shown to the user as progress (its message stored as its
    source and parameters: StoredMessage)."""

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=16, choices=InstanceStatus.choices)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.instance_id} {self.status}"

    @property
    def sentence(self) -> str | None:
        """A Kubernetes event of a known reason as a sentence in the active language
        (instances.timeline); None for any other step, shown as `text`."""
        return timeline.sentence(self.message, self.params)

    @property
    def told(self) -> str:
        """The step as the reader is told it: the sentence when there is one, else the text."""
        return self.sentence or self.text


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
