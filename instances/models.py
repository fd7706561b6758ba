from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from instances.choices import (
    BillingMode,
    DiskStatus,
    HealthRuleKind,
    InstanceStatus,
    Interconnect,
    NodeEventKind,
    NodeState,
    OfferingKind,
    StorageKind,
)
from starverse.core.ids import PublicIdField
from starverse.core.text import Deferred, parts


class Node(models.Model):
    """A GPU server of the fleet, mirrored from the cluster's Node object and reported on by
    its node agent. Only `ready` nodes take new rentals; the state changes only through
    instances.fleet.node_transition."""

    id = PublicIdField(prefix="node")
    name = models.CharField(max_length=253, unique=True, help_text="Kubernetes node name.")
    gpu_product = models.CharField(max_length=100)
    gpu_count = models.PositiveSmallIntegerField()
    gpu_memory_mb = models.PositiveIntegerField()
    interconnect = models.CharField(
        max_length=16, choices=Interconnect.choices, default=Interconnect.PCIE
    )
    nvlink_bandwidth_gbps = models.PositiveIntegerField(null=True, blank=True)
    rdma_gbps = models.PositiveIntegerField(
        null=True, blank=True, help_text="RDMA fabric, e.g. 400 for NDR."
    )
    cpu_cores = models.PositiveIntegerField(default=0)
    memory_gb = models.PositiveIntegerField(default=0)
    local_nvme_gb = models.PositiveIntegerField(default=0)
    rack = models.CharField(max_length=64, blank=True)
    switch = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.READY)
    state_reason = models.TextField(blank=True)
    state_changed_at = models.DateTimeField(default=timezone.now)
    token_hash = models.CharField(max_length=64, unique=True, null=True, blank=True)
    token_prefix = models.CharField(max_length=16, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    in_cluster = models.BooleanField(default=False, help_text="Seen in the cluster's Node list.")
    agent_version = models.CharField(max_length=32, blank=True)
    driver_version = models.CharField(max_length=32, blank=True)
    cuda_version = models.CharField(max_length=16, blank=True)
    last_report_at = models.DateTimeField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def schedulable(self) -> bool:
        return self.state == NodeState.READY


class Gpu(models.Model):
    """One GPU of a node, as NVML inventories it."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=96, unique=True)
    pci_bus_id = models.CharField(max_length=32, blank=True)
    product = models.CharField(max_length=100)
    memory_mb = models.PositiveIntegerField(default=0)
    serial = models.CharField(max_length=64, blank=True)
    vbios = models.CharField(max_length=64, blank=True)
    nvlink_links = models.PositiveSmallIntegerField(null=True, blank=True)
    lost_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index")]

    def __str__(self) -> str:
        return f"{self.node_id}#{self.index}"


class GpuSample(models.Model):
    """A raw telemetry sample of one GPU; kept 24 hours (pruned by beat)."""

    id = models.BigAutoField(primary_key=True)
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+", db_index=False)
    at = models.DateTimeField()
    util = models.SmallIntegerField(null=True)
    mem_util = models.SmallIntegerField(null=True)
    mem_used_mb = models.IntegerField(null=True)
    temp_c = models.SmallIntegerField(null=True)
    power_w = models.FloatField(null=True)
    sm_clock_mhz = models.IntegerField(null=True)
    ecc_dbe = models.IntegerField(null=True)

    class Meta:
        indexes = [
            models.Index(fields=["gpu", "at"], name="gpusample_gpu_at"),
            models.Index(fields=["at"], name="gpusample_at"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_id}@{self.at}"


class GpuRollup(models.Model):
    """One minute of one GPU's telemetry; kept 30 days."""

    id = models.BigAutoField(primary_key=True)
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+", db_index=False)
    minute = models.DateTimeField()
    samples = models.PositiveIntegerField()
    util_avg = models.FloatField(null=True)
    mem_used_mb_avg = models.FloatField(null=True)
    temp_c_max = models.SmallIntegerField(null=True)
    power_w_avg = models.FloatField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["gpu", "minute"], name="gpurollup_unique")]
        indexes = [models.Index(fields=["minute"], name="gpurollup_minute")]

    def __str__(self) -> str:
        return f"{self.gpu_id}@{self.minute}"


class NodeEvent(models.Model):
    """Something that happened to a node or a GPU: an XID, a lost GPU, a state change."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="events")
    gpu = models.ForeignKey(Gpu, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    kind = models.CharField(max_length=16, choices=NodeEventKind.choices)
    code = models.IntegerField(null=True, blank=True, help_text="XID number, where it is one.")
    message = models.TextField()
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.node_id} {self.kind} {self.at}"


class HealthRule(models.Model):
    """A rule that takes a node out of placement, as data so operators can tune it:
    heartbeat (`timeout_s`), critical XIDs (`xids`), uncorrectable ECC (`min_count`), GPU lost."""

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=32, choices=HealthRuleKind.choices)
    params = models.JSONField(default=dict, blank=True)
    action = models.CharField(
        max_length=16, choices=[(NodeState.DOWN, "down"), (NodeState.CORDONED, "cordon")]
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(action__in=["down", "cordoned"]), name="healthrule_action"
            )
        ]

    def __str__(self) -> str:
        return self.name


class GpuModel(models.Model):
    """A kind of GPU the platform sells, matched to nodes by NVML's product name."""

    id = models.SlugField(primary_key=True, max_length=32)
    name = models.CharField(max_length=64, help_text="As shown to users, e.g. H100 80GB SXM.")
    product = models.CharField(max_length=100, unique=True, help_text="NVML product name.")
    memory_gb = models.PositiveIntegerField()
    interconnect = models.CharField(max_length=16, choices=Interconnect.choices)

    def __str__(self) -> str:
        return self.name


class Offering(models.Model):
    """What a user can rent: a whole node (bare metal, 1:1) or 1–8 GPUs of one node, with CPU,
    RAM and local NVMe in proportion, at an hourly (and for whole nodes a monthly) price."""

    id = PublicIdField(prefix="off")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=OfferingKind.choices)
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="offerings")
    gpu_count = models.PositiveSmallIntegerField()
    cpu_cores = models.PositiveIntegerField()
    memory_gb = models.PositiveIntegerField()
    local_disk_gb = models.PositiveIntegerField()
    price_per_hour_fen = models.BigIntegerField()
    price_per_month_fen = models.BigIntegerField(null=True, blank=True)
    active = models.BooleanField(default=True)
    sort = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["sort", "gpu_model", "gpu_count"]
        constraints = [
            models.CheckConstraint(condition=Q(price_per_hour_fen__gt=0), name="offering_price"),
            models.CheckConstraint(
                condition=Q(gpu_count__gte=1, gpu_count__lte=16), name="offering_gpu_count"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Image(models.Model):
    """A container image users can start an instance from."""

    id = models.SlugField(primary_key=True, max_length=64)
    name = models.CharField(max_length=100)
    description = models.TextField()
    container_image = models.CharField(max_length=300)
    active = models.BooleanField(default=True)
    sort = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["sort", "name"]

    def __str__(self) -> str:
        return self.name


class Instance(models.Model):
    """A rental: an offering and an image for a tenant, placed on one node. Its status changes
    only through instances.lifecycle.instance_transition, which writes an InstanceEvent."""

    id = PublicIdField(prefix="ins")
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="instances"
    )
    created_by = models.ForeignKey("accounts.User", on_delete=models.PROTECT, related_name="+")
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
    idempotency_key = models.CharField(max_length=200, blank=True)
    request_hash = models.CharField(max_length=64, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True, db_index=True)
    running_since = models.DateTimeField(null=True, blank=True)
    session = models.PositiveIntegerField(default=0, help_text="Billing session, +1 per start.")
    k8s_namespace = models.CharField(max_length=63, blank=True)
    k8s_name = models.CharField(max_length=63, blank=True)
    ssh_port = models.PositiveIntegerField(null=True, blank=True)
    jupyter_port = models.PositiveIntegerField(null=True, blank=True)
    jupyter_token = models.CharField(max_length=64, blank=True)
    provisioning_since = models.DateTimeField(null=True, blank=True)
    seen_event_uids = models.JSONField(default=list, blank=True)
    billed_minutes = models.PositiveIntegerField(default=0)
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
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.name}"


class Allocation(models.Model):
    """One GPU of a node held by an instance. The unique (node, gpu_index) pair is what makes
    double-booking impossible, whatever the placement code does."""

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    gpu_index = models.PositiveSmallIntegerField()
    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="allocations")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "gpu_index"], name="allocation_gpu")]

    def __str__(self) -> str:
        return f"{self.node_id}#{self.gpu_index} → {self.instance_id}"


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
        from starverse.core.text import translate_stored

        return translate_stored(self.message, self.params)


class Disk(models.Model):
    """A cloud disk: a PersistentVolumeClaim of the operator's StorageClass in the tenant's
    namespace, never owner-referenced, so it outlives every instance it is attached to and only
    an explicit delete removes it. Attached to at most one instance at a time (`instance`);
    mounted at /mnt/<name>. `status` is `attached` exactly while `instance` is set."""

    id = PublicIdField(prefix="dsk")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="disks")
    created_by = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=63)
    size_gb = models.PositiveIntegerField()
    status = models.CharField(
        max_length=16, choices=DiskStatus.choices, default=DiskStatus.CREATING, db_index=True
    )
    instance = models.ForeignKey(
        Instance, null=True, blank=True, on_delete=models.PROTECT, related_name="disks"
    )
    storage_class = models.CharField(max_length=253, blank=True)
    k8s_namespace = models.CharField(max_length=63, blank=True)
    k8s_name = models.CharField(max_length=63, blank=True)
    origin = models.CharField(
        max_length=100, blank=True, help_text="The instance whose own disk this was, if kept."
    )
    error_message = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=~Q(status="deleted"),
                name="disk_name_per_tenant",
            ),
            models.CheckConstraint(condition=Q(size_gb__gte=1), name="disk_size"),
            models.CheckConstraint(
                condition=Q(status="attached", instance__isnull=False)
                | (~Q(status="attached") & Q(instance__isnull=True)),
                name="disk_attached_has_instance",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.name}"

    @property
    def mount_path(self) -> str:
        return f"/mnt/{self.name}"


class StoragePrice(models.Model):
    """What a GB of cloud disk or shared NAS costs per day, set by operators."""

    kind = models.CharField(max_length=8, choices=StorageKind.choices, primary_key=True)
    price_per_gb_day_fen = models.PositiveIntegerField()

    class Meta:
        ordering = ["kind"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.price_per_gb_day_fen} fen/GB·day"


class StorageArrears(models.Model):
    """A tenant whose balance could not pay a day of storage: nothing is charged and nothing is
    deleted until `deadline`; warnings go out at 7, 3 and 1 days left; a top-up that pays for
    the day ends it (`resolution` = paid), otherwise the storage is deleted at the deadline."""

    class Resolution(models.TextChoices):
        PAID = "paid", _("Paid after a top-up")
        DELETED = "deleted", _("Storage deleted")

    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    started_at = models.DateTimeField(default=timezone.now)
    deadline = models.DateTimeField()
    warned_days = models.JSONField(default=list, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=16, choices=Resolution.choices, blank=True)

    class Meta:
        ordering = ["-started_at"]
        verbose_name_plural = "storage arrears"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant"],
                condition=Q(resolved_at__isnull=True),
                name="storage_arrears_one_open",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} until {self.deadline:%Y-%m-%d}"
