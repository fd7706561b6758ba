"""The fleet: GPU servers (nodes), their GPUs and telemetry, health rules and node profiles.
Which GPU is held by what is the compute core's (compute.models.Allocation). Tables keep the
names they had when this lived in the instances app (`instances_*`), so moving the code moved
no data."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from fleet.choices import HealthRuleKind, Interconnect, NodeEventKind, NodeState
from starverse.core.ids import PublicIdField
from starverse.core.text import chinese_column


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


DEFAULT_REGION = "default"
# The default region's names, as migration fleet 0012 and every flush put them.
DEFAULT_REGION_NAMES = {"display_name": "Default", "display_name_zh_hans": "默认"}


class Region(models.Model):
    """A region: one Kubernetes cluster of GPU nodes, registered by an operator. Its nodes,
    instances and cloud disks live there (a disk attaches only to instances of its region).
    The row `default` (made by migration fleet 0007) is the cluster KUBECONFIG names, so a
    single-cluster installation needs no configuration."""

    name = models.SlugField(
        primary_key=True, max_length=32, help_text="The region's id in the API, e.g. cn-east-1."
    )
    display_name = models.CharField(
        max_length=64, help_text="As shown to users, in English; e.g. East China 1."
    )
    display_name_zh_hans = chinese_column(
        "display name",
        max_length=64,
        help_text="As shown to Chinese readers, e.g. 华东 1; blank: the English name.",
    )
    kubeconfig = models.CharField(
        max_length=500,
        blank=True,
        help_text="Path of the cluster's kubeconfig in the worker's pod (a Secret mounted there), "
        "or in-cluster; blank = the KUBECONFIG setting.",
    )
    active = models.BooleanField(default=True, help_text="Offered to new orders and disks.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def configured(self) -> bool:
        """Whether the platform can reach its cluster: a kubeconfig of its own or KUBECONFIG."""
        return bool(self.kubeconfig or settings.KUBECONFIG)


class Node(models.Model):
    """A GPU server of the fleet, mirrored from the cluster's Node object and reported on by
    its node agent. Only `ready` nodes take new rentals; the state changes only through
    fleet.services.node_transition. A node up for review (`review_since`) is still ready."""

    id = PublicIdField(prefix="node")
    name = models.CharField(
        max_length=253,
        unique=True,
        help_text="Kubernetes node name (unique across the regions' clusters).",
    )
    region = models.ForeignKey(
        Region, on_delete=models.PROTECT, related_name="nodes", default=DEFAULT_REGION
    )
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
    # Up for an operator's review: a cluster's pre-flight check (run in a tenant's container)
    # blamed the node and nothing of the platform's own agreed, so it stays in service until an
    # operator cordons it or clears the review (fleet.services.node_review_*).
    review_reason = models.TextField(blank=True)
    review_since = models.DateTimeField(null=True, blank=True)
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


class NodeImage(models.Model):
    """One container image a node holds, by one of the names its kubelet lists for it in
    Node.status.images (the tag and the digest form each make a row), as of the last node
    sync: placement prefers nodes that hold an order's image."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="images")
    name = models.CharField(max_length=500)
    size_bytes = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "name"], name="fleet_nodeimage_unique"),
        ]
        indexes = [models.Index(fields=["name"], name="fleet_nodeimage_name")]

    def __str__(self) -> str:
        return self.name


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


ENV_NAME = RegexValidator(
    r"^[A-Z_][A-Z0-9_]*$", gettext_lazy("An environment variable name: A-Z, 0-9 and _.")
)
MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"


class NodeProfile(models.Model):
    """How cluster ranks run on one pool of nodes, as the operator sets it: the RDMA device
    resource to request, the Multus secondary networks, host networking for whole-node
    rentals, and the NCCL settings that fit the pool's fabric. A node takes the profile whose
    `node_selector` its labels match; the one with the most selector labels wins (then by
    name), so a pool-wide profile and a narrower one can sit side by side."""

    name = models.SlugField(max_length=64, unique=True)
    node_selector = models.JSONField(
        default=dict,
        blank=True,
        help_text='Node labels a node must carry, e.g. {"nvidia.com/gpu.product": '
        '"NVIDIA-H100-80GB-HBM3"}. Empty: every node.',
    )
    rdma_resource = models.CharField(
        max_length=253,
        blank=True,
        help_text="Extended resource of the RDMA device plugin, e.g. rdma/rdma_shared_device_a. "
        "Blank: none requested.",
    )
    rdma_count = models.PositiveSmallIntegerField(default=1)
    networks = models.CharField(
        max_length=500,
        blank=True,
        help_text=f"Multus secondary networks ({MULTUS_NETWORKS} annotation), e.g. "
        "kube-system/ib-sriov. Blank: none.",
    )
    host_network = models.BooleanField(
        default=False,
        help_text="Ranks use the node's network namespace (whole-node rentals only): fastest "
        "path to the NICs, at the cost of the pod's own network isolation. Pod Security "
        "'baseline' forbids it: tenant namespaces must be 'privileged' for such ranks.",
    )
    nccl_env = models.JSONField(
        default=dict,
        blank=True,
        help_text='Environment for every rank, e.g. {"NCCL_IB_HCA": "mlx5", '
        '"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_GID_INDEX": "3", "NCCL_NET_GDR_LEVEL": "PXB"}.',
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors = {}
        if not isinstance(self.node_selector, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.node_selector.items()
        ):
            errors["node_selector"] = _("Node labels as an object of strings.")
        if not isinstance(self.nccl_env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.nccl_env.items()
        ):
            errors["nccl_env"] = _("Variables as an object of strings.")
        else:
            for key in self.nccl_env:
                try:
                    ENV_NAME(key)
                except ValidationError:
                    errors["nccl_env"] = _("%(name)s is not an environment variable name.") % {
                        "name": key
                    }
        if errors:
            raise ValidationError(errors)

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.node_selector.items())
