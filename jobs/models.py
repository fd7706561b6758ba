"""A job: a program run to its end on GPUs (issue 27), billed only while it runs, run again
after an infrastructure failure (and, by its restart policy, after its own errors), its logs
kept after its pods. Its GPUs are instances that run the program (instances.models.Workload):
ordered, admitted, queued, placed and metered by the same code as every instance; the job is
their owner and decides what happens when a program ends (jobs.services.job_sync)."""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from clusters.choices import Template
from compute.models import Image, Offering
from jobs.choices import JobStatus
from starverse.core.ids import PublicIdField
from starverse.core.text import StoredMessage


class Job(models.Model):
    id = PublicIdField(prefix="job")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    created_by = models.ForeignKey("accounts.User", on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=100)
    offering = models.ForeignKey(Offering, on_delete=models.PROTECT, related_name="+")
    image = models.ForeignKey(Image, on_delete=models.PROTECT, related_name="+")
    node_count = models.PositiveSmallIntegerField(default=1)
    command = models.TextField(blank=True, help_text="A shell command line (bash -lc).")
    script = models.TextField(blank=True, help_text="A bash script, run as a file.")
    env = models.JSONField(default=dict, blank=True)
    checkpoint_dir = models.CharField(max_length=255)
    max_restarts = models.PositiveSmallIntegerField(
        default=3, help_text="Runs again after the program's own failure (exit code not 0)."
    )
    time_limit_minutes = models.PositiveIntegerField(null=True, blank=True)
    template = models.CharField(max_length=16, choices=Template.choices, default=Template.NONE)
    disks = models.JSONField(
        default=list, blank=True, help_text="Cloud disk ids, attached (several nodes: rank i's)."
    )
    # A job of several nodes: the cluster it owns (clusters.models.Cluster.owner), whose ranks
    # are its ranks: one gang, its pre-flight check, its environment and hostfiles.
    cluster = models.OneToOneField(
        "clusters.Cluster", on_delete=models.PROTECT, null=True, blank=True, related_name="job"
    )
    nas = models.BooleanField(default=True, help_text="The tenant's NAS at /nas.")
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED)
    # restarts: pods that ran the program before the current one (the program's
    # STARVERSE_RESTART_COUNT); error_restarts: those after the program's own failure, the rest
    # after the platform's (a node lost, a pod evicted)
    restarts = models.PositiveIntegerField(default=0)
    error_restarts = models.PositiveIntegerField(default=0)
    # its program failed and its rank starts again once stopped (jobs.recovery.rank_restart)
    restart_pending = models.BooleanField(default=False)
    exit_code = models.IntegerField(null=True, blank=True)
    # {node id: how many times its program failed there}: a node it keeps failing on is put
    # up for an operator's review (jobs.recovery._node_count)
    error_nodes = models.JSONField(default=dict, db_default={}, blank=True, editable=False)
    message = models.TextField(blank=True, help_text="Why it ended, or its last lines.")
    notes = models.JSONField(
        default=list, blank=True, help_text="What of a SkyPilot task it does not honour."
    )
    idempotency_key = models.CharField(max_length=200, blank=True)
    request_hash = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="job_idempotency_key",
            ),
            models.CheckConstraint(condition=Q(node_count__gte=1), name="job_node_count"),
        ]
        indexes = [
            models.Index(
                fields=["status"],
                condition=~Q(status__in=["succeeded", "failed", "cancelled"]),
                name="job_active",
            )
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.name}"


class JobRank(models.Model):
    """Rank `index` of a job: the instance that runs it (a new one never replaces it: the
    instance moves to another node, or starts again, with its disks)."""

    instance = models.OneToOneField(
        "instances.Instance", on_delete=models.PROTECT, primary_key=True, related_name="job_rank"
    )
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="ranks")
    index = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["job", "index"]
        constraints = [
            models.UniqueConstraint(fields=["job", "index"], name="jobrank_job_index"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} rank {self.index}"


class JobEvent(StoredMessage):
    """A step of a job's life (queued, placed, started, node lost, resumed, finished), its
    message stored as its source and parameters (StoredMessage: `text` in the reader's)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=16, choices=JobStatus.choices)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id} {self.status}"
