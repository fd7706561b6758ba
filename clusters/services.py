"""Cluster services: ordering (whole-node offering, node count, cloud disks per rank,
idempotency, gang placement or the queue as one order), stop / start / terminate of every rank
together, and scaling a stopped cluster up or down. The ranks are
instances: these services decide for the cluster and move each rank through the instance
services and state machine, so billing, allocations and provisioning are the instances'."""

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone
from django.utils.translation import gettext as _

from clusters.choices import ClusterStatus, Template, status_of
from clusters.models import Cluster, Rank
from clusters.ranks import number, ranks_locked, ranks_number
from compute.choices import BillingMode, HoldingKind, OfferingKind
from compute.holdings import holding_gang_set, holding_new
from compute.models import Holding, Offering
from compute.orders import OrderKey, order_commit, ordered_before, request_hash_of
from compute.placement import Gang
from fleet.models import Node
from instances.charges import period_active
from instances.choices import InstanceStatus
from instances.lifecycle import (
    gang_place_or_queue,
    gang_start,
    instance_stop,
    instance_terminate,
    order_region,
    orderable,
    spot_wait_valid,
    ssh_keys_own,
)
from instances.models import Instance, InstanceEvent, Workload
from starverse.accounts.models import User
from starverse.core.errors import Conflict, InvalidInput
from starverse.core.hostkeys import host_key_generate
from starverse.core.roles import require_orderer
from starverse.core.text import Deferred, later

logger = logging.getLogger(__name__)
S = InstanceStatus
STOPPABLE = (S.RUNNING, S.CHECKING, S.PROVISIONING)


def cluster_order(
    *,
    user: User,
    offering_id: str,
    image_id: str,
    node_count: int,
    template: str = Template.TORCHRUN,
    name: str = "",
    billing: str = BillingMode.HOURLY,
    ssh_keys: list[str] | None = None,
    disks: list[list[str]] | None = None,
    parallelism: dict[str, int] | None = None,
    region: str = "",
    idempotency_key: str = "",
    workload: Workload | None = None,
    owner: str = "",
    spot_max_wait_minutes: int | None = None,
) -> tuple[Cluster, bool]:
    """Order a cluster: every rank placed now on whole nodes packed under as few leaf switches
    as possible, or all of them queued as one order behind earlier orders for the same GPU.
    `disks[rank]` are the tenant's cloud disks to attach to that rank (fewer entries than
    ranks leave the rest without), all attached or the order refused. `parallelism` ({tensor,
    pipeline}) fixes the Megatron-LM degrees of the launch script. Every rank goes to `region`
    (or, for "", its disks' region or any one with room: never spread over two). Returns
    (cluster, created); the same Idempotency-Key answers the same cluster. The whole cluster is
    admitted as one order (compute.admission.admit). A spot cluster that is not placed within
    `spot_max_wait_minutes` fails, every rank, at no cost (None: it waits as long as it takes)."""
    require_orderer(user)
    request = _Request(
        offering_id=offering_id,
        image_id=image_id,
        node_count=node_count,
        template=template,
        name=name,
        billing=billing,
        ssh_keys=ssh_keys or [],
        disks=disks or [],
        parallelism=parallelism,
        region=region,
        spot_max_wait_minutes=spot_max_wait_minutes,
    )
    key = OrderKey(user.tenant_id, idempotency_key, request.hash())
    if (earlier := ordered_before(Cluster.objects.all(), key, "cluster")) is not None:
        return earlier, False
    checked = request.checked(user, key)

    def order_once() -> Cluster:
        # a new cluster and new ranks each try: a try that deadlocked may have set their fields
        cluster = Cluster(**checked.fields, owner=owner, created_at=timezone.now())
        cluster.save(force_insert=True)
        ranks = _ranks_new(cluster, checked.key_ids, checked.region_id, workload)
        placed = gang_place_or_queue(
            ranks, gang=cluster.pk, disk_ids=request.disks, key=key, max_wait=spot_max_wait_minutes
        )
        ranks_number(cluster, ranks)
        _ordered_log(cluster, placed)
        return cluster

    return order_commit(Cluster.objects.all(), key, "cluster", order_once)


@dataclass(frozen=True)
class _Checked:
    """A cluster order once checked: its row's columns, and its ranks' SSH keys (the orderer's
    own) and region."""

    fields: dict[str, Any]
    key_ids: list[str]
    region_id: str | None


@dataclass(frozen=True)
class _Request:
    """What a cluster order asks for, not yet checked."""

    offering_id: str
    image_id: str
    node_count: int
    template: str
    name: str
    billing: str
    ssh_keys: list[str]
    disks: list[list[str]]
    parallelism: dict[str, int] | None
    region: str
    spot_max_wait_minutes: int | None = None

    def hash(self) -> str:
        """The request's hash, which tells a repeat from another order under the same key."""
        return request_hash_of(
            kind="cluster",
            offering=self.offering_id,
            image=self.image_id,
            node_count=self.node_count,
            template=self.template,
            name=self.name,
            billing=self.billing,
            ssh_keys=sorted(self.ssh_keys),
            parallelism=dict(self.parallelism) if self.parallelism else None,
            **({"disks": [sorted(ids) for ids in self.disks]} if self.disks else {}),
            **({"region": self.region} if self.region else {}),
            # an order without one hashes as it did before spot orders could say it
            **(
                {"spot_max_wait_minutes": self.spot_max_wait_minutes}
                if self.spot_max_wait_minutes is not None
                else {}
            ),
        )

    def checked(self, user: User, key: OrderKey) -> _Checked:
        """The order checked against the catalog, the fleet, the orderer's disks and keys."""
        spot_wait_valid(self.billing, self.spot_max_wait_minutes)
        offering, image = orderable(
            self.offering_id, self.image_id, self.billing, tenant_id=user.tenant_id
        )
        _orderable_as_cluster(offering, self.node_count)
        tensor, pipeline = _degrees_valid(self.parallelism, offering.gpu_count, self.node_count)
        _disks_valid(self.disks, self.node_count)
        key_ids = ssh_keys_own(user, self.ssh_keys)
        region_id = order_region(user, self.region, [disk for ids in self.disks for disk in ids])
        fields = {
            "tenant_id": user.tenant_id,
            "created_by": user,
            "name": self.name.strip() or f"{offering.gpu_model_id}-x{self.node_count}",
            "offering": offering,
            "image": image,
            "node_count": self.node_count,
            "template": self.template,
            "tensor_parallel": tensor,
            "pipeline_parallel": pipeline,
            "billing": self.billing,
            "idempotency_key": key.idempotency_key,
            "request_hash": key.request_hash,
        }
        return _Checked(fields, key_ids, region_id)


def _ranks_new(
    cluster: Cluster, key_ids: list[str], region_id: str | None, workload: Workload | None
) -> list[Instance]:
    """A new cluster's ranks (unsaved), one instance per node, in rank order, each with its SSH
    host key (every rank's first pass lists them all in known_hosts) and a copy of `workload`
    (companions_new inserts it with its rank)."""
    ranks = [
        Instance(
            tenant_id=cluster.tenant_id,
            created_by=cluster.created_by,
            offering=cluster.offering,
            image=cluster.image,
            name=f"{cluster.name}-{index}",
            billing=cluster.billing,
            ssh_key_ids=key_ids,
            region_id=region_id,
            created_at=cluster.created_at,
            **_host_key(),
        )
        for index in range(cluster.node_count)
    ]
    if workload is not None:
        for rank in ranks:
            rank.workload = Workload(
                owner=workload.owner, argv=workload.argv, env=workload.env, labels=workload.labels
            )
    return ranks


def _host_key() -> dict[str, str]:
    """A new rank's SSH host key, as its instance's fields."""
    key = host_key_generate()
    return {"ssh_host_key": key.private_openssh, "ssh_host_key_fingerprint": key.fingerprint}


def _ordered_log(cluster: Cluster, gang: Gang | None) -> None:
    logger.info(
        "cluster.ordered cluster=%s nodes=%d placed=%s switches=%s",
        cluster.id,
        cluster.node_count,
        gang is not None,
        gang.switches_spanned if gang else None,
    )


def _orderable_as_cluster(offering: Offering, node_count: int) -> None:
    """A cluster is of whole nodes, 2 to CLUSTER_MAX_NODES of them, and no more than the fleet
    has of that model (under one switch, where the offering asks for one): an order that could
    never be placed is refused rather than queued for ever (unless no node of the model is
    known at all, as for instances: compute.placement.misfit)."""
    if offering.kind != OfferingKind.BARE_METAL:
        raise InvalidInput(
            _("A cluster is made of whole nodes: choose a bare-metal (whole node) offering."),
            code="not_whole_node",
        )
    most = settings.CLUSTER_MAX_NODES
    if not 2 <= node_count <= most:
        raise InvalidInput(
            _("A cluster has 2 to %(most)d nodes; choose a node count in that range.")
            % {"most": most},
            code="invalid_node_count",
        )
    nodes = Node.objects.filter(
        gpu_product=offering.gpu_model.product, gpu_count=offering.gpu_count
    )
    if offering.cluster_one_switch:
        largest = (
            nodes.values("switch")
            .annotate(n=Count("pk"))
            .order_by("-n")
            .values_list("n", flat=True)
        )
        have = next(iter(largest), 0)
        if have and node_count > have:
            raise InvalidInput(
                _(
                    "This offering places a cluster under one network switch, and the largest "
                    "switch has %(have)d %(model)s nodes. Choose at most %(have)d nodes."
                )
                % {"have": have, "model": offering.gpu_model.name},
                code="too_many_nodes",
            )
        return
    have = nodes.count()
    # no node of the model known yet (the fleet not synced): it queues, as an instance does
    if have and node_count > have:
        raise InvalidInput(
            _("The fleet has %(have)d %(model)s nodes. Choose at most %(have)d nodes.")
            % {"have": have, "model": offering.gpu_model.name},
            code="too_many_nodes",
        )


def _disks_valid(disks: list[list[str]], node_count: int) -> None:
    """One list of disk ids per rank at most, each disk named once in the whole order (a disk
    is on one instance at a time); whose disks they are and whether they are free is checked
    under their locks as they are attached (instances.volumes.disks_attach_at_order)."""
    if len(disks) > node_count:
        raise InvalidInput(
            _("Disks are given for %(given)d ranks, but the cluster has %(nodes)d nodes.")
            % {"given": len(disks), "nodes": node_count},
            code="too_many_disk_lists",
        )
    seen: set[str] = set()
    for ids in disks:
        for disk_id in ids:
            if disk_id in seen:
                raise InvalidInput(
                    _("The disk %(id)s is named twice; a disk is attached to one node only.")
                    % {"id": disk_id},
                    code="duplicate_disk",
                )
            seen.add(disk_id)


def _degrees_valid(
    parallelism: dict[str, int] | None, gpus_per_node: int, node_count: int
) -> tuple[int | None, int | None]:
    """Chosen Megatron-LM degrees must split the cluster's GPUs: tensor parallelism stays
    inside a node (it divides the GPUs per node), and tensor × pipeline divides the world
    size (data parallelism takes what is left)."""
    if not parallelism:
        return None, None
    tensor, pipeline = parallelism["tensor"], parallelism.get("pipeline", 1)
    world = gpus_per_node * node_count
    if gpus_per_node % tensor:
        raise InvalidInput(
            _(
                "Tensor parallelism %(tensor)d does not divide the %(gpus)d GPUs of a node: "
                "choose a divisor of %(gpus)d."
            )
            % {"tensor": tensor, "gpus": gpus_per_node},
            code="invalid_parallelism",
        )
    if world % (tensor * pipeline):
        raise InvalidInput(
            _(
                "Tensor × pipeline parallelism (%(product)d) does not divide the cluster's "
                "%(world)d GPUs: choose degrees whose product divides %(world)d."
            )
            % {"product": tensor * pipeline, "world": world},
            code="invalid_parallelism",
        )
    return tensor, pipeline


def cluster_stop(*, cluster: Cluster, reason: str = "") -> Cluster:
    """Stop every rank: billing stops now for all of them, the pods go, the disks are kept; a
    monthly cluster keeps its nodes reserved while its month runs. `reason` is each rank's
    timeline entry (instances.lifecycle.instance_stop)."""
    with transaction.atomic():
        ranks = ranks_locked(cluster.pk)
        if not any(rank.status in STOPPABLE for rank in ranks):
            raise Conflict(
                _("Only a running or starting cluster can be stopped."), code="wrong_state"
            )
        for rank in ranks:
            if rank.status in STOPPABLE:
                instance_stop(instance_id=rank.id, reason=reason, by_owner=True)
    return cluster


def cluster_start(*, cluster: Cluster) -> Cluster:
    """Start a stopped or failed cluster: all ranks again, together, as one order. Its time
    in checking counts afresh (CLUSTER_CHECKING_MAX_MINUTES), as do its failed rounds."""
    with transaction.atomic():
        ranks = ranks_locked(cluster.pk)
        if not ranks or any(rank.status not in (S.STOPPED, S.FAILED) for rank in ranks):
            raise Conflict(_("Only a stopped cluster can be started."), code="wrong_state")
        gang_start(ranks=ranks)
        Cluster.objects.filter(pk=cluster.pk).update(checking_since=None)
    return cluster


def cluster_terminate(*, cluster: Cluster) -> Cluster:
    """Terminate every rank: the pods and the nodes go back, billing ends now."""
    with transaction.atomic():
        for rank in ranks_locked(cluster.pk):
            instance_terminate(instance_id=rank.id, by_owner=True)
    return cluster


def cluster_scale(
    *, cluster: Cluster, node_count: int, user: User, keep_disks: bool = False
) -> tuple[Cluster, Deferred | None]:
    """Scale a stopped cluster to `node_count` nodes (2 to CLUSTER_MAX_NODES, as at the
    order). Down: the highest ranks are terminated (their own disks deleted, unless
    `keep_disks` keeps them as cloud disks; attached cloud disks detached, data intact) and
    leave the cluster's ranks (their rank becomes null; their cost stays the cluster's). A
    monthly cluster is not scaled down while the ranks it would remove are in their paid
    month: the month was paid for them, and a refund is not how monthly rentals work. Up: new
    ranks are added stopped, without a node, with the cluster's offering, image and SSH keys,
    so the next start places every rank together. Every rank's environment, hostfiles and the
    shared Secret follow the new count at that start (clusters.ranks.RankHooks.pod).
    Returns the cluster and what changed, as the timeline says it (None: nothing to do)."""
    with transaction.atomic():
        ranks = ranks_locked(cluster.pk)
        locked = Cluster.objects.select_for_update().select_related("offering__gpu_model")
        cluster = locked.get(pk=cluster.pk)
        status = status_of([rank.status for rank in ranks])
        if status != ClusterStatus.STOPPED:
            raise Conflict(
                _("Only a stopped cluster can be scaled; this one is %(status)s. Stop it first.")
                % {"status": ClusterStatus(status).label.lower()},
                code="wrong_state",
            )
        _orderable_as_cluster(cluster.offering, node_count)
        if cluster.tensor_parallel:
            _degrees_valid(
                {"tensor": cluster.tensor_parallel, "pipeline": cluster.pipeline_parallel or 1},
                cluster.offering.gpu_count,
                node_count,
            )
        before = len(ranks)
        if node_count == before:
            return cluster, None
        if node_count < before:
            said = _scale_down(ranks, ranks[node_count:], keep_disks=keep_disks)
        else:
            said = _scale_up(cluster, ranks, node_count, user)
        cluster.node_count = node_count
        cluster.save(update_fields=["node_count"])
        InstanceEvent.objects.create(instance=ranks[0], status=ranks[0].status, message=said)
    logger.info("cluster.scaled cluster=%s from=%d to=%d", cluster.id, before, node_count)
    return cluster, said


def _scale_down(ranks: list[Instance], removed: list[Instance], *, keep_disks: bool) -> Deferred:
    paid = [rank for rank in removed if period_active(rank)]
    if paid:
        raise Conflict(
            _(
                "This monthly cluster's nodes are paid for until %(until)s: it cannot be scaled "
                "down within its paid month. Scale it down after that date, or terminate it."
            )
            % {"until": timezone.localtime(paid[0].monthly.paid_until).strftime("%Y-%m-%d %H:%M")},
            code="paid_period",
        )
    for rank in removed:
        InstanceEvent.objects.create(
            instance=rank,
            status=rank.status,
            message=later(
                "Removed from the cluster as it scaled down to %(count)s nodes (it was rank "
                "%(rank)s)."
            )
            % {"count": len(ranks) - len(removed), "rank": number(rank)},
        )
        instance_terminate(instance_id=rank.id, keep_disk=keep_disks, by_owner=True)
        holding_gang_set(rank.id, "")  # placed, started and stopped with the others no more
    names = ", ".join(str(number(rank)) for rank in removed)
    # The ranks left are the cluster's; the removed rows stay for its history and cost.
    Rank.objects.filter(pk__in=[rank.pk for rank in removed]).update(index=None)
    values = {"before": len(ranks), "after": len(ranks) - len(removed), "ranks": names}
    if keep_disks:
        return (
            later(
                "Scaled down from %(before)s to %(after)s nodes: ranks %(ranks)s terminated, "
                "their own disks kept as cloud disks and their cloud disks detached, data "
                "intact. Every rank gets the new layout at the next start."
            )
            % values
        )
    return (
        later(
            "Scaled down from %(before)s to %(after)s nodes: ranks %(ranks)s terminated, their "
            "own disks deleted and their cloud disks detached, data intact. Every rank gets the "
            "new layout at the next start."
        )
        % values
    )


def _scale_up(cluster: Cluster, ranks: list[Instance], node_count: int, user: User) -> Deferred:
    now = timezone.now()
    head = ranks[0]
    added = [
        Instance(
            tenant_id=cluster.tenant_id,
            created_by=user,
            offering=cluster.offering,
            image=cluster.image,
            name=f"{cluster.name}-{index}",
            billing=cluster.billing,
            status=S.STOPPED,
            ssh_key_ids=list(head.ssh_key_ids),
            auto_recover=head.auto_recover,
            created_at=now,
            **_host_key(),
        )
        for index in range(len(ranks), node_count)
    ]
    holdings = [
        holding_new(
            holding_id=rank.id,
            kind=HoldingKind.RANK,
            tenant_id=rank.tenant_id,
            created_by_id=user.pk,
            offering=cluster.offering,
            billing=cluster.billing,
            region_id=head.region_id,
            gang=cluster.pk,
            parent=cluster.pk,
            waiting=False,
        )[0]
        for rank in added
    ]
    Holding.objects.bulk_create(holdings)
    Instance.objects.bulk_create(added)
    ranks_number(cluster, added, first=len(ranks))
    InstanceEvent.objects.bulk_create(
        InstanceEvent(
            instance=rank,
            status=S.STOPPED,
            message=later(
                "Added as rank %(rank)s as the cluster scaled up to %(count)s nodes; it starts "
                "with the others."
            )
            % {"rank": number(rank), "count": node_count},
        )
        for rank in added
    )
    names = ", ".join(str(number(rank)) for rank in added)
    return later(
        "Scaled up from %(before)s to %(after)s nodes: ranks %(ranks)s added, stopped. The "
        "next start places every rank together, each with the new layout."
    ) % {"before": len(ranks), "after": node_count, "ranks": names}
