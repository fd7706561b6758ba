from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Lower
from django.utils import timezone

from compute.models import Offering
from endpoints.choices import LIVE, EndpointStatus, Engine, SourceKind
from starverse.core.ids import PublicIdField


class Endpoint(models.Model):
    """A served model: one Deployment of an inference engine over a read-only snapshot of a
    disk, a NAS folder or a public-pool model, scaled between `min_replicas` and
    `max_replicas` by the autoscaler (KEDA's HTTP add-on) and billed per replica-minute while a
    replica is Ready. The row holds the desired state; the worker converges the cluster to it
    (endpoints.provisioning). `generation` rises with every "update", which takes a new
    snapshot and rolls the replicas one by one."""

    id = PublicIdField(prefix="ep")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    created_by = models.ForeignKey("accounts.User", on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=63)
    offering = models.ForeignKey(Offering, on_delete=models.PROTECT, related_name="+")
    engine = models.CharField(max_length=16, choices=Engine.choices)
    engine_options = models.JSONField(default=dict, blank=True)
    source_kind = models.CharField(max_length=8, choices=SourceKind.choices)
    source_disk = models.ForeignKey(
        "storage.Disk", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    source_path = models.CharField(
        max_length=500, blank=True, help_text="The model's folder, relative to the source."
    )
    source_dataset = models.CharField(max_length=64, blank=True)
    # The claim snapshots are taken of (the disk's or the NAS's); for a public-pool model, none:
    # `source_path` is then its folder under /public/models.
    source_claim = models.CharField(max_length=63, blank=True)
    min_replicas = models.PositiveSmallIntegerField(default=1)
    max_replicas = models.PositiveSmallIntegerField(default=1)
    # What the balance running out did: min and desired 0 until the owner scales it up again.
    suspended = models.BooleanField(default=False)
    status = models.CharField(
        max_length=16, choices=EndpointStatus.choices, default=EndpointStatus.PROVISIONING
    )
    error_message = models.TextField(blank=True)
    generation = models.PositiveIntegerField(default=1)
    # the last generation whose every object converge made sure of (Deployment, Service,
    # autoscaler, route): the endpoint is not called running before (endpoints.scheduler)
    converged_generation = models.PositiveIntegerField(default=0, db_default=0)
    k8s_namespace = models.CharField(max_length=63, blank=True)
    k8s_name = models.CharField(max_length=63, blank=True)
    replicas_ready = models.PositiveSmallIntegerField(default=0)
    replicas_desired = models.PositiveSmallIntegerField(default=0)
    restarts = models.PositiveIntegerField(default=0)
    cold_start_s = models.FloatField(
        null=True, blank=True, help_text="Seconds from a replica's pod to its readiness, last seen."
    )
    cost_fen = models.BigIntegerField(default=0)
    idempotency_key = models.CharField(max_length=200, blank=True)
    request_hash = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="endpoint_idempotency_key",
            ),
            models.CheckConstraint(
                condition=Q(max_replicas__gte=F("min_replicas")) & Q(max_replicas__gte=1),
                name="endpoint_replicas_range",
            ),
            # Its host name and objects carry the id in lower case (DNS has no case).
            models.UniqueConstraint(Lower("id"), name="endpoint_id_lower"),
        ]
        indexes = [
            # the scheduler's beat asks every second whether any endpoint is live
            models.Index(fields=["status"], condition=Q(status__in=LIVE), name="endpoint_live"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.name}"


class EndpointKey(models.Model):
    """An API key of one endpoint, made and revoked by its owner. Only the key's SHA-256 is
    kept; the key itself (`sk-sv-…`) is shown once. A revoked key stops passing the gateway
    within its check cache (≤ 2 s)."""

    id = PublicIdField(prefix="epk")
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(
        max_length=16, help_text="The key's first characters, to tell keys apart."
    )
    key_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey("accounts.User", on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.id} {self.prefix}…"


class EndpointReplica(models.Model):
    """One replica (pod) of an endpoint, from the moment the platform's scheduler placed it:
    the GPUs it holds are compute.Allocation rows pointing here, so instances and endpoints
    never share a GPU. `ready_since` is set while the pod is Ready; each Ready stretch is a
    billing session whose minutes are charged once under
    `endpoint:{replica}:{session}:{minute}`. `gone_at`: the pod is gone and its GPUs free."""

    id = PublicIdField(prefix="epr")
    # Its GPU holding (compute's row of the same id: compute migration 0002), as a relation
    # without a column of its own.
    holding = models.ForeignObject(
        "compute.Holding",
        on_delete=models.DO_NOTHING,
        from_fields=["id"],
        to_fields=["id"],
        related_name="+",
        related_query_name="replica",
    )
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="replicas")
    pod_name = models.CharField(max_length=253)
    node = models.ForeignKey(
        "fleet.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    ready_since = models.DateTimeField(null=True, blank=True)
    session = models.PositiveIntegerField(default=0)
    restarts = models.PositiveIntegerField(default=0)
    gone_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "pod_name"],
                name="endpoint_replica_pod",
            )
        ]
        indexes = [
            # the replicas still holding GPUs: the scheduler's pass and its billing read these
            models.Index(
                fields=["endpoint"], condition=Q(gone_at__isnull=True), name="endpoint_replica_held"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.endpoint_id}/{self.pod_name}"


class EndpointSample(models.Model):
    """Request statistics of one endpoint over one interval, as the proxy in front of it saw
    them (the development gateway; in production the engine's Prometheus metrics)."""

    id = models.BigAutoField(primary_key=True)
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField(db_index=True)
    seconds = models.FloatField()
    requests = models.PositiveIntegerField(default=0)
    tokens = models.PositiveIntegerField(default=0)
    latency_p50_ms = models.FloatField(null=True, blank=True)
    latency_p99_ms = models.FloatField(null=True, blank=True)
    replicas_ready = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["at"]

    def __str__(self) -> str:
        return f"{self.endpoint_id}@{self.at:%H:%M:%S}"
