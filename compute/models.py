"""The compute core's rows: the catalog every product orders from (offerings and images), an
operator's limits for a tenant, the GPU holdings of every product (an instance, a cluster's
rank, an endpoint's replica) and which GPU of which node each holds (allocations). The tables
that came from the instances and fleet apps keep their names (`instances_*`), so moving the
code moved no data."""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from compute.choices import BillingMode, HoldingKind, HoldingState, ImageStatus, OfferingKind
from fleet.models import GpuModel, Node
from starverse.core.ids import PublicIdField
from starverse.core.text import chinese_column, localized


def _below_hourly(kind: str) -> models.CheckConstraint:
    """An offering's `kind` price an hour (trial, spot): blank, or 1 fen up to the hourly one."""
    field = f"{kind}_price_per_hour_fen"
    return models.CheckConstraint(
        condition=Q(**{f"{field}__isnull": True})
        | Q(**{f"{field}__gte": 1, f"{field}__lte": models.F("price_per_hour_fen")}),
        name=f"offering_{kind}_price",
        violation_error_message=f"The {kind} price must be at least 1 fen and at most the "
        "hourly price.",
    )


class Offering(models.Model):
    """What a user can rent: a whole node (bare metal, 1:1) or 1–8 GPUs of one node, with CPU,
    RAM and local NVMe in proportion, at an hourly (and for whole nodes a monthly) price."""

    id = PublicIdField(prefix="off")
    name = models.CharField(max_length=100, help_text="In English; shown where no translation is.")
    name_zh_hans = chinese_column("name", max_length=100, help_text="Blank: the English name.")
    slug = models.SlugField(
        max_length=64,
        unique=True,
        null=True,
        blank=True,
        help_text="A stable key for links and the cost calculator's presets, e.g. "
        "h100-80g-bare-metal.",
    )
    kind = models.CharField(max_length=16, choices=OfferingKind.choices)
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="offerings")
    gpu_count = models.PositiveSmallIntegerField()
    cpu_cores = models.PositiveIntegerField()
    memory_gb = models.PositiveIntegerField()
    local_disk_gb = models.PositiveIntegerField()
    system_disk_gb = models.PositiveIntegerField(
        default=50,
        db_default=50,
        help_text=_(
            "The system disk each instance gets free: what the user installs outside their "
            "disks (/usr, /etc, /opt, /root, /home, /var) is kept there across stops and moves."
        ),
    )
    price_per_hour_fen = models.BigIntegerField()
    price_per_month_fen = models.BigIntegerField(null=True, blank=True)
    trial_price_per_hour_fen = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="What trial credit pays per hour of this offering (billed by the minute, at "
        "most the hourly price); blank: trial credit is not spent on it.",
    )
    cpu_only_price_per_hour_fen = models.BigIntegerField(
        null=True,
        blank=True,
        default=10,
        help_text="What an hour of an instance of this offering costs started without its GPUs "
        "(no-GPU mode: its disks, CPU and memory, no GPU), billed by the minute, from trial "
        "credit too; blank: no-GPU mode is not offered.",
    )
    spot_price_per_hour_fen = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="What an interruptible (spot) rental of it costs an hour, billed by the minute; "
        "blank: not offered as spot.",
    )
    active = models.BooleanField(default=True)
    sort = models.PositiveSmallIntegerField(default=0)
    # The cluster's RuntimeClass for these pods (e.g. a gVisor or Kata sandbox, or "nvidia");
    # blank = the cluster's default runtime.
    runtime_class = models.CharField(max_length=63, blank=True, default="")
    cluster_one_switch = models.BooleanField(
        default=False,
        help_text="Clusters of this (whole-node) offering are placed under one leaf switch only; "
        "an order that does not fit under one waits instead of spanning switches.",
    )
    preflight_floor_gbps = models.FloatField(
        null=True,
        blank=True,
        help_text="Clusters of this (whole-node) offering are ready, and billed, only when the "
        "pre-flight all-reduce reaches this bus bandwidth, in GB/s as nccl-tests prints busbw "
        "(every node pair too); blank: any result passes.",
    )

    class Meta:
        db_table = "instances_offering"
        ordering = ["sort", "gpu_model", "gpu_count"]
        constraints = [
            models.CheckConstraint(condition=Q(price_per_hour_fen__gt=0), name="offering_price"),
            _below_hourly("trial"),
            models.CheckConstraint(
                condition=Q(gpu_count__gte=1, gpu_count__lte=16), name="offering_gpu_count"
            ),
            models.CheckConstraint(
                condition=Q(cpu_only_price_per_hour_fen__isnull=True)
                | Q(cpu_only_price_per_hour_fen__gte=1),
                name="offering_cpu_only_price",
                violation_error_message="The no-GPU price must be at least 1 fen.",
            ),
            _below_hourly("spot"),
        ]

    def __str__(self) -> str:
        return localized(self, "name")


class ImageQuerySet(models.QuerySet["Image"]):
    def catalogue(self) -> "ImageQuerySet":
        """The operator's active images, which everyone may order."""
        return self.filter(active=True, tenant__isnull=True)

    def usable_by(self, tenant_id: str | None) -> "ImageQuerySet":
        """What a tenant may order: the catalogue and its own ready images (a team's are its
        members'), never another tenant's."""
        own = Q(tenant_id=tenant_id, status=ImageStatus.READY) if tenant_id else Q(pk__in=[])
        return self.filter(Q(tenant__isnull=True) | own, active=True)


class Image(models.Model):
    """A container image users can start an instance from: one of the operator's catalogue
    (`tenant` empty), or a tenant's own, brought by reference or saved from an instance, which
    only that tenant (and so a team's members) sees and orders. A deleted one is inactive."""

    id = models.SlugField(primary_key=True, max_length=64)
    name = models.CharField(max_length=100, help_text="In English; shown where no translation is.")
    name_zh_hans = chinese_column("name", max_length=100, help_text="Blank: the English name.")
    description = models.TextField()
    description_zh_hans = chinese_column("description", help_text="Blank: the English text.")
    container_image = models.CharField(max_length=300)
    size_bytes = models.BigIntegerField(
        default=0,
        help_text=_("Compressed size the nodes pull (the registry's), for the expected pull time."),
    )
    prepull = models.BooleanField(
        default=False,
        help_text=_(
            "Keep it on every node of the catalogue's GPU models (a pre-pull DaemonSet), so "
            "instances of it start in seconds."
        ),
    )
    active = models.BooleanField(default=True)
    sort = models.PositiveSmallIntegerField(default=0)
    tenant = models.ForeignKey(
        "accounts.Tenant",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text=_("Whose image this is; blank: the catalogue's."),
    )
    created_by = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(
        max_length=16, choices=ImageStatus.choices, default="ready", db_default="ready"
    )
    base = models.CharField(
        max_length=300,
        blank=True,
        default="",
        db_default="",
        help_text=_("The image it was saved from, if saved."),
    )
    pull_secret = models.CharField(
        max_length=253,
        blank=True,
        default="",
        db_default="",
        help_text=_("The tenant namespace's Secret with the registry credentials, if any."),
    )
    error_message = models.TextField(blank=True, default="", db_default="")
    saved_from = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",
        help_text=_("The instance it was saved from, if saved."),
    )
    # the save's Idempotency-Key (POST /instances/{id}/image): a retried save is the same one
    idempotency_key = models.CharField(max_length=200, blank=True, default="", db_default="")
    created_at = models.DateTimeField(default=timezone.now, db_default=Now())
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = ImageQuerySet.as_manager()

    class Meta:
        db_table = "instances_image"
        ordering = ["sort", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=Q(tenant__isnull=False, deleted_at__isnull=True),
                name="image_name_per_tenant",
            ),
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="image_save_idempotency",
            ),
        ]

    def __str__(self) -> str:
        return localized(self, "name")


class TenantLimits(models.Model):
    """An operator's limits for one tenant, above or below the defaults in the settings; an
    empty field is the default. Checked when an order is placed or queued and when an
    instance starts, under the tenant's wallet lock."""

    tenant = models.OneToOneField(
        "accounts.Tenant", on_delete=models.CASCADE, related_name="limits"
    )
    max_queued_orders = models.PositiveIntegerField(
        null=True, blank=True, help_text="Orders waiting in the queue. Empty: MAX_QUEUED_ORDERS."
    )
    max_running_gpus = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="GPUs held (starting, running, stopping) plus queued. Empty: MAX_RUNNING_GPUS.",
    )
    trial_max_premium_gpus = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="While the account has never paid in (trial credit only): GPUs of the premium "
        "models held plus queued. Empty: TRIAL_MAX_PREMIUM_GPUS.",
    )
    note = models.TextField(blank=True, help_text="Why these limits (who asked, when).")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "instances_tenantlimits"
        verbose_name = "tenant limits"
        verbose_name_plural = "tenant limits"

    def __str__(self) -> str:
        return f"limits of {self.tenant_id}"


class Holding(models.Model):
    """GPUs of one node that something holds, or waits in line for: an instance, a rank of a
    cluster, a replica of an inference endpoint. Placement, the queue and (later) the meter
    read these rows, never the products' own; the product's row has the same id (`ins_…`,
    `epr_…`), which a foreign key from the product's table enforces (compute migration 0002).

    `state` moves with the product's life: queued while it waits (in `queued_at` order,
    behind every earlier order for the same GPUs that can pay: compute.queue), placed while its
    allocations exist, released when it holds none and waits for none. `gang`: the cluster
    whose ranks are placed together, all or none. `region`: where it must run (null: any
    region, until placed)."""

    id = models.CharField(primary_key=True, max_length=32)
    kind = models.CharField(max_length=16, choices=HoldingKind.choices)
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    created_by = models.ForeignKey("accounts.User", on_delete=models.PROTECT, related_name="+")
    offering = models.ForeignKey(Offering, on_delete=models.PROTECT, related_name="+")
    billing = models.CharField(
        max_length=16, choices=BillingMode.choices, default=BillingMode.HOURLY
    )
    state = models.CharField(
        max_length=16, choices=HoldingState.choices, default=HoldingState.QUEUED
    )
    region = models.ForeignKey(
        "fleet.Region", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    gang = models.CharField(max_length=32, blank=True)
    gpus_attached = models.BooleanField(
        db_default=True,
        default=True,
        help_text="False: it runs (or last ran) in no-GPU mode, its pod without GPUs, billed "
        "at the offering's cpu_only_price_per_hour_fen (a monthly rental keeps its GPUs "
        "allocated meanwhile and pays nothing more).",
    )
    cpu_node = models.ForeignKey(
        Node,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="In no-GPU mode without GPUs of its own: the node its pod runs on, whose CPU "
        "and memory placement counts it against (it has no allocations there).",
    )
    preempted_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When its GPUs were last taken back (a spot holding preempted); the "
        "operator overview counts preemptions by it.",
    )
    # What the holding serves when it is a part of something: a rank's cluster, a replica's
    # endpoint (blank for an instance, which is its own). Budgets count what a member runs by
    # it without reading the products' tables.
    parent = models.CharField(max_length=32, blank=True, db_index=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    wait_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="A spot order gives up waiting at this time (its max wait); null: it waits.",
    )
    preempt_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="A spot holding taken back for a paying order: when its GPUs are taken (the "
        "notice's deadline, SPOT_PREEMPT_GRACE_S after it); cleared when it is placed again.",
    )
    preemptions = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="How many times it was taken back (the spot preemption rate).",
    )
    unfunded_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Queued: when its turn came and the balance did not cover its runway. The "
        "queue passes it over; it fails after QUEUE_UNFUNDED_GRACE_MINUTES unless topped up.",
    )
    meter_key = models.CharField(max_length=96, blank=True)
    metered_since = models.DateTimeField(null=True, blank=True)
    metered_minutes = models.PositiveIntegerField(default=0)
    pending_minutes = models.PositiveIntegerField(default=0)
    pending_trial_minutes = models.PositiveIntegerField(default=0)
    pending_cash_fen = models.BigIntegerField(default=0)
    pending_promo_fen = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # the queue: what waits, oldest first (a small part of the table)
            models.Index(
                fields=["queued_at", "id"],
                condition=Q(state=HoldingState.QUEUED),
                name="holding_queue",
            ),
            models.Index(fields=["gang"], condition=~Q(gang=""), name="holding_gang"),
            # the meter's tick: what is billed by the minute now
            models.Index(
                fields=["metered_since"],
                condition=Q(metered_since__isnull=False),
                name="holding_metering",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(pending_cash_fen__gte=0, pending_promo_fen__gte=0),
                name="holding_pending_non_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.state}"


class Allocation(models.Model):
    """One GPU of a node held by a holding (compute.models.Holding: an instance, a cluster's
    rank, an endpoint's replica). The unique (node, gpu_index) pair is what makes
    double-booking impossible, whatever the placement code does."""

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    gpu_index = models.PositiveSmallIntegerField()
    holding = models.ForeignKey(Holding, on_delete=models.CASCADE, related_name="allocations")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "instances_allocation"
        constraints = [
            models.UniqueConstraint(fields=["node", "gpu_index"], name="allocation_gpu"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id}#{self.gpu_index} → {self.holding_id}"


class TokenOrder(models.Model):
    """An order or a start made through an API token that has a spending cap: what it ordered
    (an instance's id, a cluster's, an endpoint's) and what its first hour (a month, billed
    monthly) cost at the order. The token's spend is counted from these rows, under the wallet
    lock (compute.token_caps)."""

    token = models.ForeignKey("accounts.ApiToken", on_delete=models.CASCADE, related_name="+")
    ordered_id = models.CharField(max_length=32)
    first_hour_fen = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["token", "created_at"])]

    def __str__(self) -> str:
        return f"{self.ordered_id} by {self.token_id}"
