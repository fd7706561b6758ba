"""A cluster's ranks: instances, one per whole node, that are one gang of the instances app
(placed, queued, started, stopped and paused together: instances.gangs, the gang named by the
cluster's id), each numbered by its clusters.models.Rank row. What a rank is beyond an instance
is here, and reaches the instances app through the gang hooks registered from
ClustersConfig.ready (RankHooks): its pod as a rank (clusters.pods), the objects the ranks
share, the words the instances app names a rank with, and what happens when a rank's node is
lost (rank_lost: the whole cluster pauses while the rank moves)."""

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from clusters import pods
from clusters.models import Cluster, Rank
from compute.placement import choose_nodes
from events.choices import EventType
from events.emit import emit_about
from fleet.models import Node
from fleet.selectors import node_profile_for
from instances.choices import HOLDS_GPUS, InstanceStatus
from instances.gangs import GangHooks
from instances.lifecycle import switches_held
from instances.models import Instance, InstanceEvent, Workload
from instances.provisioning.converge import host_keys_assign
from instances.states import (
    gang_locked,
    instance_mark_placed,
    instance_requeue,
    rank_mark_checking,
    rank_mark_restarting,
)
from starverse.core import kube
from starverse.core.text import later

logger = logging.getLogger(__name__)
S = InstanceStatus


def number(instance: Instance) -> int:
    """The rank's number in its cluster (read with it: ranks_locked, or select_related)."""
    index = instance.cluster_rank.index
    if index is None:
        raise LookupError(f"{instance.pk} was removed from its cluster")
    return index


def _numbered(instances: list[Instance], cluster_id: str) -> list[Instance]:
    """`instances` that are ranks of the cluster now, in rank order, each with its Rank row
    read (one query for them all)."""
    rows = {
        row.instance_id: row
        for row in Rank.objects.filter(cluster_id=cluster_id, index__isnull=False)
    }
    found = []
    for instance in instances:
        row = rows.get(instance.pk)
        if row is not None:
            instance.cluster_rank = row
            found.append(instance)
    return sorted(found, key=number)


def ranks_locked(cluster_id: str) -> list[Instance]:
    """The cluster's ranks, locked in the gang's order (instances.states.gang_locked: the one
    order every service takes them in), returned in rank order. Ranks removed by scaling down
    are the cluster's history, not its ranks."""
    return _numbered(gang_locked(cluster_id), cluster_id)


def ranks_number(cluster: Cluster, instances: list[Instance], first: int = 0) -> None:
    """New ranks of `cluster` (saved instances of its gang), numbered from `first` in order."""
    rows = [
        Rank(instance=instance, cluster=cluster, index=first + offset)
        for offset, instance in enumerate(instances)
    ]
    Rank.objects.bulk_create(rows)
    for instance, row in zip(instances, rows, strict=True):
        instance.cluster_rank = row


def rank_replace(rank: Instance, message: str, *, avoid: frozenset[str] = frozenset()) -> bool:
    """A cluster's rank (its cluster's ranks locked) moves to another whole node (its own was
    lost, or blamed by the pre-flight check): its GPUs go back and it is placed again, ahead of
    new orders, on a free whole node near the cluster's other ranks, never its own node or one
    of `avoid` (node ids), with the same rank, DNS name and disks; with none free it waits
    queued (the queue serves it as its cluster's head) and its timeline says so. The cluster
    was admitted when ordered: no runway is asked again. Returns whether it was placed now."""
    left = frozenset({str(rank.node_id), *avoid}) if rank.node_id else avoid
    instance_requeue(rank, message)
    cluster_id = rank.cluster_rank.cluster_id
    others = list(Instance.objects.filter(cluster_rank__cluster_id=cluster_id).exclude(pk=rank.pk))
    # in its own region: its disks and its cluster's other ranks are there
    gang = choose_nodes(
        rank.offering, 1, rank.region_id or "", prefer=switches_held(others), avoid=left
    )
    if gang is None:
        InstanceEvent.objects.create(
            instance=rank,
            status=S.QUEUED,
            message=later(
                "No free whole node for this rank right now; it waits queued, and the "
                "pre-flight check runs again once it is up."
            ),
        )
        return False
    instance_mark_placed(rank, *gang.placements[0])
    return True


def rank_lost(instance_id: str, *, cluster_id: str, node: Node, reason: str) -> bool:
    """A cluster's rank lost its node: billing pauses for the whole cluster (every running rank
    is charged its closed minutes and goes back to checking), the rank is placed again on a
    healthy whole node (rank_replace), and once it is up the pre-flight check runs again and
    all ranks run, and are billed, together. False if the rank had moved on meanwhile."""
    with transaction.atomic():
        ranks = ranks_locked(cluster_id)
        rank = next((r for r in ranks if r.pk == instance_id), None)
        if rank is None or rank.node_id != node.pk or rank.status not in HOLDS_GPUS:
            return False
        if rank.status == S.STOPPING:
            return False
        now = timezone.now()
        at = timezone.localtime(now).strftime("%Y-%m-%d %H:%M:%S")
        words = {"node": node.name, "reason": reason, "at": at, "rank": number(rank)}
        if Workload.objects.filter(instance__in=ranks).exists():
            _programs_restart([r for r in ranks if r.pk != rank.pk], words, now=now)
        else:
            _others_pause(ranks, words, now=now)
        rank_replace(
            rank,
            later(
                "The node %(node)s was lost (%(reason)s). Placing rank %(rank)s again on a "
                "healthy node, with the same rank, name and disks."
            )
            % words,
        )
        emit_about(Cluster.objects.get(pk=cluster_id), EventType.CLUSTER_DEGRADED, **words)
    logger.info(
        "cluster.rank_lost cluster=%s rank=%s node=%s", cluster_id, words["rank"], node.name
    )
    return True


def _others_pause(ranks: list[Instance], words: dict[str, Any], *, now: Any) -> None:
    for other in ranks:
        if other.status == S.RUNNING:
            rank_mark_checking(
                other,
                later(
                    "Rank %(rank)s's node %(node)s was lost (%(reason)s): billing paused for "
                    "the whole cluster at %(at)s, until the rank is up on a healthy node and "
                    "the pre-flight check passes again."
                )
                % words,
                now=now,
            )


def _programs_restart(healthy: list[Instance], words: dict[str, Any], *, now: Any) -> None:
    """The ranks run a program to its end (a multi-node job's): every program starts again,
    together, so each healthy rank gets a new pod on its own node (its GPUs and disks kept;
    billing paused), whose program waits for the next pre-flight round (clusters.gates)."""
    for other in healthy:
        if other.status in (S.RUNNING, S.CHECKING, S.PROVISIONING):
            rank_mark_restarting(
                other,
                later(
                    "Rank %(rank)s's node %(node)s was lost (%(reason)s): billing paused for "
                    "the whole job at %(at)s; this rank stays on its node and its program "
                    "starts again with the others once the rank is placed and the pre-flight "
                    "check passes."
                )
                % words,
                now=now,
            )


def _member(instance: Instance) -> Rank:
    """The instance's Rank row, with its cluster (and the cluster's offering, for the layout)."""
    return Rank.objects.select_related("cluster__offering").get(instance_id=instance.pk)


# What a rank's provisioning pass read in shared_ensure for pod(), which follows it in the same
# thread: (instance id, its Rank row, its node's profile).
_rendering = threading.local()


class RankHooks(GangHooks):
    """The clusters app's answers to the instances app about gang members (ranks)."""

    def shared_ensure(
        self,
        instance: Instance,
        node: Node,
        *,
        tenant_fingerprint: str,
        tenant_converge: Callable[[], None],
    ) -> None:
        """The tenant's namespace and policies and the cluster's objects (its headless Service
        as made first, the key Secret and the files ConfigMap brought up to date: a rank moved
        or the cluster scaled changes what they hold), made sure of once a round: a rank whose
        provisioning began before the last rank to make sure of them began to, and which
        renders the same (the digest of it all: Cluster.objects_fingerprint), trusts them; any
        other (the first ranks of a start, a rank placed again, a cluster scaled, a policy
        changed) reads and converges them all. Eight reads a rank of a 128-node start become
        eight for its first ranks; an object deleted since is made again by the next round, or
        at once when a create finds its namespace gone (shared_forget)."""
        member = _member(instance)
        cluster = member.cluster
        profile = node_profile_for(node)
        _rendering.last = (instance.pk, member, profile)  # for pod(), next in the same pass
        siblings = pods.cluster_ranks(member.cluster_id)
        if missing := [sibling.instance_id for sibling in siblings if not sibling.ssh_host_key]:
            # ranks are made with their keys (clusters.services); ranks made before they were
            # get theirs here, so that known_hosts lists every rank from the start
            host_keys_assign(list(Instance.objects.filter(pk__in=missing)))
            siblings = pods.cluster_ranks(member.cluster_id)
        shared = pods.shared_objects(member, profile, cluster.ssh_private_key, siblings)
        fingerprint = pods.objects_fingerprint(shared, tenant_fingerprint)
        since = instance.pod_watch.provisioning_since
        ensured = cluster.objects_ensured_at
        if cluster.objects_fingerprint == fingerprint and ensured and since and since <= ensured:
            return
        began = timezone.now()
        tenant_converge()
        for manifest in shared:
            kube.ensure(manifest, update=manifest["kind"] != "Service", read_first=True)
        Cluster.objects.filter(pk=cluster.pk).update(
            objects_fingerprint=fingerprint, objects_ensured_at=began
        )

    def shared_forget(self, gang: str) -> None:
        Cluster.objects.filter(pk=gang).update(objects_ensured_at=None)

    def pod(
        self, instance: Instance, node: Node, pod: dict[str, Any], service: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The rank's pod and SSH Service (shared_ensure made the cluster's objects), from
        the rank and node profile shared_ensure read in this pass."""
        last = getattr(_rendering, "last", None)
        _rendering.last = None  # used once: a later pass renders from what it reads itself
        if last is not None and last[0] == instance.pk:
            _pk, member, profile = last
        else:
            member, profile = _member(instance), node_profile_for(node)
        return pods.rank_pod(pod, member, profile), pods.rank_service(service, profile)

    def shared_objects(self, gang: str) -> list[tuple[str, str]]:
        return pods.object_names(gang)

    def member_lost(self, instance_id: str, *, gang: str, node: Node, reason: str) -> bool:
        return rank_lost(instance_id, cluster_id=gang, node=node, reason=reason)

    def member_words(self, instance: Instance) -> dict[str, object]:
        row = Rank.objects.get(instance_id=instance.pk)
        return {"rank": row.index, "cluster": row.cluster_id}

    def member_link(self, instance: Instance) -> tuple[str, str]:
        row = Rank.objects.select_related("cluster").get(instance_id=instance.pk)
        said = _("rank %(rank)s of the cluster %(name)s") % {
            "rank": row.index,
            "name": row.cluster.name,
        }
        return said, reverse("clusters:detail", args=[row.cluster_id])
