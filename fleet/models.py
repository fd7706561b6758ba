"""The fleet: GPU servers (nodes), their GPUs and telemetry, health rules, and which GPU is
held by which rental (allocations). Tables keep the names they had when this lived in the
instances app (`instances_*`), so moving the code moved no data."""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from fleet.choices import HealthRuleKind, Interconnect, NodeEventKind, NodeState
from starverse.core.ids import PublicIdField


class GpuModel(models.Model):
    """A kind of GPU the platform sells, matched to nodes by NVML's product name."""

    id = models.SlugField(primary_key=True, max_length=32)
    name = models.CharField(max_length=64, help_text="As shown to users, e.g. H100 80GB SXM.")
    product = models.CharField(max_length=100, unique=True, help_text="NVML product name.")
    memory_gb = models.PositiveIntegerField()
    interconnect = models.CharField(max_length=16, choices=Interconnect.choices)
    premium = models.BooleanField(
        default=False,
        help_text="One of the dearest models: accounts on trial credit only may hold at most "
        "TRIAL_MAX_PREMIUM_GPUS of them (or their own limit).",
    )

    class Meta:
        db_table = "instances_gpumodel"

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    """A GPU server of the fleet, mirrored from the cluster's Node object and reported on by
    its node agent. Only `ready` nodes take new rentals; the state changes only through
    fleet.services.node_transition."""

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
    # The Node's status.allocatable as the cluster last reported it (capacity less the kubelet's
    # reservations): what placement fits pods into. Null where never reported (no limit known).
    allocatable_cpu_m = models.PositiveIntegerField(null=True, blank=True)
    allocatable_memory_mib = models.PositiveBigIntegerField(null=True, blank=True)
    allocatable_ephemeral_mib = models.PositiveBigIntegerField(null=True, blank=True)
    allocatable_pods = models.PositiveIntegerField(null=True, blank=True)
    rack = models.CharField(max_length=64, blank=True)
    switch = models.CharField(
        max_length=64, blank=True, help_text="Leaf switch, from topology.starverse.io/switch."
    )
    fabric = models.CharField(
        max_length=64, blank=True, help_text="RDMA fabric, from topology.starverse.io/fabric."
    )
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
        db_table = "instances_node"
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
        db_table = "instances_gpu"
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
        db_table = "instances_gpusample"
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
        db_table = "instances_gpurollup"
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
        db_table = "instances_nodeevent"
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
        db_table = "instances_healthrule"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(action__in=["down", "cordoned"]), name="healthrule_action"
            )
        ]

    def __str__(self) -> str:
        return self.name


class Allocation(models.Model):
    """One GPU of a node held by an instance. The unique (node, gpu_index) pair is what makes
    double-booking impossible, whatever the placement code does."""

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    gpu_index = models.PositiveSmallIntegerField()
    instance = models.ForeignKey(
        "instances.Instance", on_delete=models.CASCADE, related_name="allocations"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "instances_allocation"
        constraints = [models.UniqueConstraint(fields=["node", "gpu_index"], name="allocation_gpu")]

    def __str__(self) -> str:
        return f"{self.node_id}#{self.gpu_index} → {self.instance_id}"
