"""Reads of clusters: each with its ranks (one query for a page), its derived status, the
switches its nodes span and its place in the queue."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from clusters.choices import status_of
from clusters.models import Cluster, Preflight
from clusters.ranks import number
from fleet.models import Gpu, GpuSample, Node
from instances.choices import HOLDS_GPUS, InstanceStatus
from instances.models import Instance, InstanceEvent
from instances.selectors import instance_metrics, queue_positions


def _held(rank: Instance) -> Node | None:
    """The node a rank holds now (as an instance shows its node: while starting or running)."""
    return rank.node if rank.status in HOLDS_GPUS else None


@dataclass
class ClusterView:
    """A cluster as its pages and the API show it."""

    cluster: Cluster
    ranks: list[Instance] = field(default_factory=list)
    queue_position: int | None = None
    preflight: Preflight | None = None  # its latest pre-flight round
    # ranks scaled away (terminated, number null): what they cost is still the cluster's
    removed: list[Instance] = field(default_factory=list)

    @property
    def status(self) -> str:
        return status_of([rank.status for rank in self.ranks])

    @property
    def switches_spanned(self) -> int | None:
        """Leaf switches under the ranks' nodes; None unless every rank holds its node."""
        if not self.ranks or any(_held(rank) is None for rank in self.ranks):
            return None
        return len({rank.node.switch for rank in self.ranks if rank.node is not None})

    def node_of(self, rank: Instance) -> Node | None:
        return _held(rank)

    @property
    def cost_fen(self) -> int:
        return sum(rank.cost_fen for rank in [*self.ranks, *self.removed])


def cluster_views(clusters: list[Cluster]) -> list[ClusterView]:
    """Views of `clusters` with their ranks and latest pre-flight rounds in three queries,
    whatever their number."""
    ranks: dict[str, list[Instance]] = defaultdict(list)
    removed: dict[str, list[Instance]] = defaultdict(list)
    rows = (
        Instance.objects.filter(cluster_rank__cluster__in=[c.pk for c in clusters])
        .select_related("node", "offering__gpu_model", "cluster_rank")
        .order_by("cluster_rank__cluster_id", "cluster_rank__index")
    )
    for rank in rows:
        row = rank.cluster_rank
        (ranks if row.index is not None else removed)[str(row.cluster_id)].append(rank)
    heads = [found[0] for found in ranks.values() if found]
    positions = queue_positions(heads)
    latest: dict[str, Preflight] = {}
    for found in Preflight.objects.filter(cluster__in=[c.pk for c in clusters]).order_by(
        "cluster_id", "-round"
    ):
        latest.setdefault(str(found.cluster_id), found)
    return [
        ClusterView(
            cluster=cluster,
            ranks=ranks[cluster.pk],
            queue_position=positions.get(ranks[cluster.pk][0].pk) if ranks[cluster.pk] else None,
            preflight=latest.get(cluster.pk),
            removed=removed[cluster.pk],
        )
        for cluster in clusters
    ]


def cluster_view(cluster: Cluster) -> ClusterView:
    return cluster_views([cluster])[0]


def cluster_events(cluster: Cluster) -> list[InstanceEvent]:
    """The timeline of every rank, oldest first (each row's instance says its rank)."""
    return list(
        InstanceEvent.objects.filter(instance__cluster_rank__cluster=cluster)
        .select_related("instance__cluster_rank")
        .order_by("at", "id")
    )


def _stopped_rank_metrics(
    rank: Instance, *, window: timedelta = timedelta(hours=1)
) -> list[dict[str, Any]]:
    """A stopped rank's series: it has given its GPUs back, so instance_metrics (which reads the
    GPUs it holds) finds none. A rank is a whole node, so they are every GPU of the node it ran
    on, from its placement there (the first step of its last run: instance_mark_placed) to its
    stop, the last `window` of that; what the node did after the stop is the next renter's."""
    if rank.node_id is None or rank.status != InstanceStatus.STOPPED:
        return []
    steps = list(
        InstanceEvent.objects.filter(
            instance=rank, status__in=(InstanceStatus.PROVISIONING, InstanceStatus.STOPPED)
        )
        .order_by("at", "id")
        .values_list("status", "at")
    )
    if not steps or steps[-1][0] != InstanceStatus.STOPPED:
        return []
    stopped = steps[-1][1]
    before = [i for i, (status, _at) in enumerate(steps[:-1]) if status == InstanceStatus.STOPPED]
    run = steps[before[-1] + 1 if before else 0 : -1]
    placed = run[0][1].replace(microsecond=0) if run else stopped - window
    since = max(stopped - window, placed)
    gpus = list(Gpu.objects.filter(node_id=rank.node_id).order_by("index"))
    series: dict[int, list[dict[str, Any]]] = defaultdict(list)
    samples = GpuSample.objects.filter(gpu__in=gpus, at__gte=since, at__lte=stopped).order_by("at")
    for sample in samples.values("gpu_id", "at", "util", "mem_used_mb", "temp_c", "power_w"):
        series[sample["gpu_id"]].append(
            {k: sample[k] for k in ("at", "util", "mem_used_mb", "temp_c", "power_w")}
        )
    return [{"gpu": g.index, "uuid": g.uuid, "samples": series.get(g.pk, [])} for g in gpus]


def cluster_metrics(cluster: Cluster) -> list[dict[str, Any]]:
    """Per rank, the GPU telemetry its instance shows (instances.selectors.instance_metrics);
    a stopped rank's, the samples it took before it stopped (_stopped_rank_metrics)."""
    ranks = (
        Instance.objects.filter(cluster_rank__cluster=cluster, cluster_rank__index__isnull=False)
        .select_related("node", "cluster_rank")
        .order_by("cluster_rank__index")
    )
    return [
        {"rank": number(rank), "gpus": instance_metrics(rank) or _stopped_rank_metrics(rank)}
        for rank in ranks
    ]
