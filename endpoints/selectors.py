"""Reads of endpoints that more than one caller needs: the shape the API and the console show,
and what endpoints burn per hour (for the runway notices)."""

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.utils.translation import gettext as _

from billing.usage import Resource
from compute.models import Image
from datasets.choices import DatasetKind
from datasets.models import PublicDataset
from endpoints.choices import Engine, SourceKind
from endpoints.engines import engine_command, engine_image
from endpoints.manifests import endpoint_url, replica_bounds
from endpoints.models import Endpoint, EndpointKey, EndpointReplica
from instances.selectors import expected_pull_s
from starverse.accounts.models import User
from starverse.core.roles import is_manager
from starverse.core.sizes import format_size
from storage.choices import DiskStatus
from storage.models import Disk, SharedStorage


def endpoint_region(endpoint: Endpoint) -> str:
    """The region an endpoint runs in: its source disk's (the snapshot is taken where the
    claim lives); a NAS folder or a public-pool model, the default cluster's ("")."""
    disk = endpoint.source_disk
    return str(disk.region_id) if disk is not None and disk.region_id else ""


def endpoint_view(endpoint: Endpoint) -> dict[str, Any]:
    """An endpoint as the API and the console show it."""
    low, high = replica_bounds(endpoint)
    source: dict[str, Any]
    if endpoint.source_kind == "disk":
        source = {"disk": endpoint.source_disk_id, "path": endpoint.source_path}
    elif endpoint.source_kind == "nas":
        source = {"nas_path": endpoint.source_path}
    else:
        source = {"dataset": endpoint.source_dataset}
    return {
        "id": endpoint.id,
        "name": endpoint.name,
        "status": endpoint.status,
        "url": endpoint_url(endpoint.id),
        "model": endpoint.name,
        "source": source,
        "engine": endpoint.engine,
        "engine_options": endpoint.engine_options,
        "engine_command": engine_command(endpoint.engine, endpoint.engine_options, endpoint.name),
        "offering": endpoint.offering_id,
        "gpu_count": endpoint.offering.gpu_count,
        "price_per_replica_hour_fen": endpoint.offering.price_per_hour_fen,
        "min_replicas": endpoint.min_replicas,
        "max_replicas": endpoint.max_replicas,
        "replicas": {
            "ready": endpoint.replicas_ready,
            "desired": endpoint.replicas_desired,
            "min": low,
            "max": high,
            "restarts": endpoint.restarts,
        },
        "cold_start_s": endpoint.cold_start_s,
        "generation": endpoint.generation,
        "cost_fen": endpoint.cost_fen,
        "error_message": endpoint.error_message,
        "created_at": endpoint.created_at,
    }


def endpoint_keys(endpoint: Endpoint) -> QuerySet[EndpointKey]:
    return endpoint.keys.filter(revoked_at__isnull=True).order_by("created_at")


def endpoint_spend_per_hour_fen() -> dict[str, int]:
    """What each tenant's Ready endpoint replicas burn per hour."""
    spend: dict[str, int] = defaultdict(int)
    rows = (
        EndpointReplica.objects.filter(ready_since__isnull=False, gone_at__isnull=True)
        .values_list("endpoint__tenant_id", "endpoint__offering__price_per_hour_fen")
        .annotate(n=Count("pk"))
    )
    for tenant_id, price, count in rows:
        spend[tenant_id] += price * count
    return dict(spend)


def endpoints_live(tenant_id: str) -> QuerySet[Endpoint]:
    return (
        Endpoint.objects.filter(tenant_id=tenant_id)
        .exclude(Q(status="deleted"))
        .select_related("offering")
        .order_by("-created_at")
    )


def endpoints_named(ids: set[str]) -> dict[str, Resource]:
    """The endpoints among `ids`, as usage reports name them, with one replica's GPUs (their
    minutes are replica-minutes): billing.usage.resource_namer_register, from endpoints.apps."""
    columns = ("id", "name", "offering__gpu_count", "created_by_id", "created_by__email")
    named = {}
    for pk, name, gpus, user_id, email in Endpoint.objects.filter(pk__in=ids).values_list(*columns):
        label = _("Inference endpoint %(name)s (%(id)s)") % {"name": name, "id": pk}
        named[pk] = Resource(label, gpus, str(user_id), email)
    return named


def endpoints_ordered(tenant_id: str, user_id: str) -> QuerySet[Any]:
    """The ids of the endpoints a member made in a tenant (their charges carry the endpoint's
    id): what budgets count as theirs (instances.budgets.budget_spender_register)."""
    return Endpoint.objects.filter(tenant_id=tenant_id, created_by_id=user_id).values("pk")


def endpoints_hourly_fen(tenant_id: str, user_id: str | None, besides: str | None) -> int:
    """An hour of the tenant's (or the member's) endpoint replicas up now, at their endpoints'
    hourly prices; an endpoint's own replicas do not count toward its own scaling."""
    replicas = EndpointReplica.objects.filter(
        endpoint__tenant_id=tenant_id, gone_at__isnull=True
    ).exclude(endpoint_id=besides)
    if user_id is not None:
        replicas = replicas.filter(endpoint__created_by_id=user_id)
    price = "endpoint__offering__price_per_hour_fen"
    return int(replicas.aggregate(total=Sum(price, default=0))["total"])


@dataclass(frozen=True)
class SourceChoice:
    """One source the "Serve a model" form offers: `value` is what the form posts (kind:id),
    `size` what it holds, for people (a disk's or the NAS's size, a model's weights)."""

    value: str
    kind: str
    name: str
    size: str
    detail: str = ""


def source_choices(user: User) -> list[SourceChoice]:
    """What the user may serve from, grouped by kind: the account's ready cloud disks (in a
    team, a member's own; owners' and admins' all, as endpoints.services.source_resolve
    allows), its shared NAS, and the public pool's models."""
    disks = Disk.objects.filter(
        tenant_id=user.tenant_id,
        status__in=(DiskStatus.AVAILABLE, DiskStatus.ATTACHED),
    ).exclude(k8s_name="")
    if not is_manager(user):
        disks = disks.filter(created_by_id=user.pk)
    found = [
        SourceChoice(f"disk:{d.pk}", SourceKind.DISK, d.name, f"{d.size_gb:,} GB", d.pk)
        for d in disks.order_by("name")
    ]
    nas = SharedStorage.objects.live().filter(tenant_id=user.tenant_id).exclude(k8s_name="")
    found += [
        SourceChoice("nas", SourceKind.NAS, str(SourceKind.NAS.label), f"{n.size_gb:,} GB", n.pk)
        for n in nas[:1]
    ]
    models = PublicDataset.objects.filter(active=True, kind=DatasetKind.MODEL)
    found += [
        SourceChoice(
            f"dataset:{m.pk}", SourceKind.DATASET, m.name, format_size(m.size_bytes), m.directory
        )
        for m in models.order_by("sort", "name")
    ]
    return found


def cold_start_estimates() -> dict[str, int]:
    """Per engine, the seconds a replica's start waits for its engine's image on a node that
    does not hold it yet (instances.selectors.expected_pull_s, as the Rent page shows), the
    part of a cold start the platform can tell before it is measured; 0 where the image is not
    in the catalogue."""
    sizes = {
        image.container_image: expected_pull_s(image)
        for image in Image.objects.filter(
            container_image__in=[engine_image(engine) for engine in Engine]
        )
    }
    return {engine: sizes.get(engine_image(engine), 0) for engine in Engine}
