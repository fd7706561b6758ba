"""Reads of the fleet that more than one screen or route needs."""

from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from fleet.choices import HARDWARE_XIDS, NodeEventKind
from fleet.models import Gpu, GpuSample, Node, NodeEvent, NodeProfile, Region
from starverse.core import kube
from starverse.core.errors import InvalidInput


def latest_samples(
    gpu_ids: list[int], *, within: timedelta = timedelta(minutes=2)
) -> dict[int, GpuSample]:
    """The newest raw sample of each GPU, if it reported recently."""
    rows = GpuSample.objects.filter(gpu_id__in=gpu_ids, at__gte=timezone.now() - within).order_by(
        "gpu_id", "-at"
    )
    latest: dict[int, GpuSample] = {}
    for row in rows:
        latest.setdefault(row.gpu_id, row)
    return latest


def node_agent_fault(node: Node, *, since: datetime) -> str:
    """What the node's own agent reported wrong with it since `since`, in words, or "": a
    hardware XID, uncorrectable ECC errors, a lost GPU. This is the platform's own signal about
    a node, which no tenant's container can forge (NVML on the host, sent with the node's
    token), whatever the health rules then did with it."""
    event = (
        NodeEvent.objects.filter(node=node, at__gte=since)
        .filter(
            Q(kind=NodeEventKind.XID, code__in=sorted(HARDWARE_XIDS))
            | Q(kind__in=[NodeEventKind.ECC, NodeEventKind.GPU_LOST])
        )
        .order_by("-at")
        .first()
    )
    if event is not None and event.kind == NodeEventKind.XID:
        return f"XID {event.code} reported at {event.at:%Y-%m-%d %H:%M:%S} UTC ({event.message})"
    if event is not None:
        return event.message
    lost = Gpu.objects.filter(node=node, lost_at__isnull=False).order_by("index").first()
    if lost is not None:
        return f"GPU {lost.index} lost"
    ecc = (
        GpuSample.objects.filter(gpu__node=node, at__gte=since, ecc_dbe__gt=0)
        .select_related("gpu")
        .order_by("-at")
        .first()
    )
    if ecc is not None:
        return f"uncorrectable ECC errors on GPU {ecc.gpu.index}"
    return ""


def fleet_nodes() -> QuerySet[Node]:
    return Node.objects.prefetch_related("gpus").order_by("name")


def node_profile_for(node: Node) -> NodeProfile | None:
    """The operator's profile for the node's pool: of those whose selector its labels match,
    the one with the most selector labels (then the first by name); None when none matches."""
    labels = node.labels or {}
    matching = [p for p in NodeProfile.objects.order_by("name") if p.matches(labels)]
    return max(matching, key=lambda p: len(p.node_selector), default=None)


def region_target(region: Region) -> kube.Target:
    """The cluster a region's calls go to (starverse.core.kube.cluster)."""
    return kube.Target(name=region.name, kubeconfig=region.kubeconfig)


def region_scope(region_id: str | None) -> AbstractContextManager[kube.Target | None]:
    """A context in which every cluster call goes to this region's cluster; None (or a region
    that is gone) leaves the default, KUBECONFIG's."""
    region = Region.objects.filter(pk=region_id).first() if region_id else None
    if region is None:
        return nullcontext()
    return kube.cluster(region_target(region))


def regions_configured() -> list[Region]:
    """The regions whose cluster the platform can reach (their own kubeconfig, or KUBECONFIG):
    the ones the periodic sync, reconcile and sweeps serve, one after another."""
    return [region for region in Region.objects.order_by("name") if region.configured]


def region_orderable(name: str) -> Region:
    """The active region an order or a new disk names; an unknown one is a 400 that lists the
    regions there are."""
    region = Region.objects.filter(pk=name, active=True).first()
    if region is None:
        names = ", ".join(Region.objects.filter(active=True).values_list("name", flat=True))
        raise InvalidInput(
            _("Unknown region %(name)s. The regions are: %(names)s.")
            % {"name": name, "names": names},
            code="unknown_region",
        )
    return region
