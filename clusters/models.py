from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from clusters.choices import Template
from compute.choices import BillingMode
from compute.models import Image, Offering
from starverse.core.hostkeys import host_key_generate
from starverse.core.ids import PublicIdField


def ssh_key_new() -> str:
    """A new cluster's key pair (OpenSSH private key), made with its row."""
    return host_key_generate().private_openssh


class Cluster(models.Model):
    """A multi-node rental: `node_count` whole nodes of one offering, one rank each. Each rank
    is an instance (clusters.models.Rank says which, and its number), so ordering, allocations,
    metering, disks, access Secrets and the state machine are the instances'; the cluster is
    their aggregate and its status derives from theirs (clusters.choices.status_of). Its ranks'
    holdings form one gang (compute.models.Holding.gang, the cluster's id): placed and queued
    all together, never some of them (compute.placement.choose_nodes)."""

    id = PublicIdField(prefix="clu")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    created_by = models.ForeignKey("accounts.User", on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=100)
    offering = models.ForeignKey(Offering, on_delete=models.PROTECT, related_name="+")
    image = models.ForeignKey(Image, on_delete=models.PROTECT, related_name="+")
    node_count = models.PositiveSmallIntegerField()
    template = models.CharField(max_length=16, choices=Template.choices, default=Template.TORCHRUN)
    billing = models.CharField(
        max_length=16, choices=BillingMode.choices, default=BillingMode.HOURLY
    )
    # Megatron-LM's degrees when the user chose them (else tensor = GPUs per node, pipeline 1;
    # instances.provisioning.ranks.Layout.degrees); data parallel is what is left.
    tensor_parallel = models.PositiveSmallIntegerField(null=True, blank=True)
    pipeline_parallel = models.PositiveSmallIntegerField(null=True, blank=True)
    # The key pair every rank logs in to every other with (OpenSSH private key, unencrypted),
    # made with the row (clusters migration 0006 gave one to older rows that had none); the
    # database is the source of truth for what the cluster's Secret holds.
    ssh_private_key = models.TextField(blank=True, editable=False, default=ssh_key_new)
    # When the cluster began waiting for its pre-flight check (its first round since it was
    # started or last passed): its time in checking is capped from then, across rounds
    # (CLUSTER_CHECKING_MAX_MINUTES). Null until then, and again once a round passes.
    checking_since = models.DateTimeField(null=True, blank=True, editable=False)
    # What owns it and acts on it (a multi-node job's id: its ranks run the job's program), or
    # "" for a cluster the user rents: an owned cluster is not one of the user's clusters (the
    # clusters pages and API do not show it; the job's do).
    owner = models.CharField(max_length=32, blank=True, default="", db_default="", editable=False)
    idempotency_key = models.CharField(max_length=200, blank=True)
    request_hash = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # What the ranks share on the cluster (the tenant's namespace, RoleBindings and
    # NetworkPolicies, the headless Service, key Secret and files ConfigMap), as last made sure
    # of by a rank (clusters.ranks.RankHooks.shared_ensure): the digest of what it rendered and
    # when it began. A rank whose provisioning began before that, rendering the same, trusts
    # them instead of reading them all again; any other makes sure of them itself.
    objects_fingerprint = models.CharField(
        max_length=32, blank=True, default="", db_default="", editable=False
    )
    objects_ensured_at = models.DateTimeField(
        null=True, blank=True, default=None, db_default=None, editable=False
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="cluster_idempotency_key",
            ),
            models.CheckConstraint(condition=Q(node_count__gte=2), name="cluster_node_count"),
            # Its objects and DNS names carry the id in lower case (DNS has no case): one
            # cluster per lower-cased id.
            models.UniqueConstraint(Lower("id"), name="cluster_id_lower"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.name}"


class Rank(models.Model):
    """Rank `index` of a cluster: which instance it is. An instance is a cluster's rank only
    through this row (the instances app knows only that its holding is one of a gang). A rank
    removed by scaling down keeps its row with `index` null, for the cluster's history and
    cost; it is no longer one of the cluster's ranks."""

    instance = models.OneToOneField(
        "instances.Instance",
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="cluster_rank",
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="ranks")
    index = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["cluster", "index"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "index"],
                condition=Q(index__isnull=False),
                name="rank_cluster_index",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id} rank {self.index} ({self.instance_id})"


class PreflightStatus(models.TextChoices):
    RUNNING = "running", _("Running")
    PASSED = "passed", _("Passed")
    FAILED = "failed", _("Failed")
    # the platform voided it: the cluster changed while it ran (a rank stopped, moved or was
    # lost), the cluster's API could not be reached, or the worker running it died. Not
    # counted as failed; CLUSTER_CHECKING_MAX_MINUTES bounds how long rounds can go on so.
    ABANDONED = "abandoned", _("Abandoned")


class Preflight(models.Model):
    """One round of a cluster's pre-flight check: an NCCL all-reduce across every rank, then
    between pairs of nodes (each node in two pairs at least), run by `starverse-preflight` in
    rank 0's container. Bandwidths are bus bandwidth in GB/s, as nccl-tests prints busbw."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="preflights")
    round = models.PositiveSmallIntegerField()
    status = models.CharField(
        max_length=16, choices=PreflightStatus.choices, default=PreflightStatus.RUNNING
    )
    busbw_gbps = models.FloatField(null=True, blank=True)
    floor_gbps = models.FloatField(null=True, blank=True)
    pairs = models.JSONField(default=list, blank=True)
    # the ranks the round blamed, with their node's name: each was replaced (its node cordoned
    # only when the platform's own signal agreed, else put up for an operator's review)
    bad_nodes = models.JSONField(default=list, blank=True)
    # the node of each rank while it ran, {rank: node id}: a result for other nodes is void
    nodes = models.JSONField(default=dict, blank=True)
    message = models.TextField(blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # the running round's lease: the worker running it renews it while the check runs
    # (CLUSTER_PREFLIGHT_LEASE_S); a round whose lease ran out had its worker die and is
    # abandoned by the next one. Null for rounds begun before leases (their bound: started_at)
    lease_until = models.DateTimeField(null=True, blank=True, default=None, db_default=None)
    # when the gates of its ranks that run a program (a job's) were opened after it passed
    # (clusters.gates); a passed round whose gates stay shut past RECONCILE_STUCK_AFTER_S had
    # its task lost (a killed worker, a flushed broker) and gets it again
    gates_opened_at = models.DateTimeField(null=True, blank=True, default=None, db_default=None)

    class Meta:
        ordering = ["cluster", "round"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "round"], name="preflight_round"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id} round {self.round} {self.status}"
