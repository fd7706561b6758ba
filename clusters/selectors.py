"""Reads of clusters: each with its ranks (one query for a page), its derived status, the
switches its nodes span and its place in the queue."""

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from clusters.choices import status_of
from clusters.models import Cluster, Preflight
from clusters.ranks import number
from fleet.models import Node
from instances.choices import HOLDS_GPUS
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


def cluster_metrics(cluster: Cluster) -> list[dict[str, Any]]:
    """Per rank, the GPU telemetry its instance shows (instances.selectors.instance_metrics)."""
    ranks = (
        Instance.objects.filter(cluster_rank__cluster=cluster, cluster_rank__index__isnull=False)
        .select_related("node", "cluster_rank")
        .order_by("cluster_rank__index")
    )
    return [{"rank": number(rank), "gpus": instance_metrics(rank)} for rank in ranks]
