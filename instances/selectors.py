import json
import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from billing.calculator import CatalogPrice
from billing.services import trial_minutes
from billing.usage import Resource
from compute.admission import AdmissionReads, Usage, limits_of
from compute.choices import BillingMode, OfferingKind
from compute.models import Allocation, Holding, Image, Offering, TenantLimits
from compute.placement import capacity, needs, times
from compute.pricing import hour_price_sql
from compute.queue import positions
from fleet.models import Gpu, GpuModel, GpuSample, Node, NodeImage, Region
from instances.budgets import budgets_sql
from instances.choices import HOLDS_GPUS, STARTING_OR_RUNNING, InstanceStatus
from instances.models import Instance
from starverse.core import kube
from starverse.core.db import execute_prepared
from starverse.core.text import localized

S = InstanceStatus


def availability(offerings: list[Offering]) -> dict[str, int]:
    """How many of each offering could be placed right now on free, healthy capacity (each
    counted on its own, as if it were the only order); read the way placement reads it."""
    per_product = {
        product: capacity(product) for product in {o.gpu_model.product for o in offerings}
    }
    result = {}
    for offering in offerings:
        nodes, taken, rooms, _regions = per_product[offering.gpu_model.product]
        want = needs(offering)
        total = 0
        for node_id, _name, count in nodes:
            left = count - len(taken[node_id])
            by_room = times(rooms[node_id], want)
            if offering.kind == OfferingKind.BARE_METAL:
                fits = count == offering.gpu_count and left == count and by_room != 0
                total += 1 if fits else 0
            else:
                by_gpus = left // offering.gpu_count
                total += by_gpus if by_room is None else min(by_gpus, by_room)
        result[offering.id] = total
    return result


def _fits(offering: Offering, count: int, left: int, by_room: int | None) -> int:
    """How many instances of `offering` a node of `count` GPUs with `left` free and room for
    `by_room` pods (None: unlimited) takes now."""
    if offering.kind == OfferingKind.BARE_METAL:
        return 1 if count == offering.gpu_count and left == count and by_room != 0 else 0
    by_gpus = left // offering.gpu_count
    return by_gpus if by_room is None else min(by_gpus, by_room)


def expected_pull_s(image: Image) -> int:
    """Seconds a node takes to pull the image at the typical bandwidth (rounded up)."""
    return math.ceil(image.size_bytes / (settings.IMAGE_PULL_BANDWIDTH_MBPS * 1_000_000))


def image_warmth(offerings: list[Offering], images: list[Image]) -> dict[str, dict[str, int]]:
    """Per offering id, per image id, how long its first start would pull: 0 when a free
    node that fits the offering holds the image (placement takes such a node first), else the
    image's size ÷ IMAGE_PULL_BANDWIDTH_MBPS. Read the way availability is, plus one query
    for the images the nodes hold (kept by the node sync, so pre-pulled ones count once their
    DaemonSet has pulled them)."""
    names = {image.id: kube.image_name(image.container_image) for image in images}
    held: dict[str, set[str]] = defaultdict(set)
    for node_id, name in NodeImage.objects.filter(name__in=set(names.values())).values_list(
        "node_id", "name"
    ):
        held[name].add(node_id)
    per_product = {
        product: capacity(product) for product in {o.gpu_model.product for o in offerings}
    }
    result: dict[str, dict[str, int]] = {}
    for offering in offerings:
        nodes, taken, rooms, _regions = per_product[offering.gpu_model.product]
        want = needs(offering)
        free = {
            node_id
            for node_id, _name, count in nodes
            if _fits(offering, count, count - len(taken[node_id]), times(rooms[node_id], want))
        }
        result[offering.id] = {
            image.id: 0 if free & held[names[image.id]] else expected_pull_s(image)
            for image in images
        }
    return result


def offering_regions(offerings: list[Offering]) -> dict[str, list[str]]:
    """The active regions where nodes of each offering's GPU model exist, by offering id."""
    by_product: dict[str, set[str]] = defaultdict(set)
    rows = Node.objects.filter(
        gpu_product__in={o.gpu_model.product for o in offerings}, region__active=True
    )
    if settings.KUBECONFIG:
        rows = rows.filter(in_cluster=True)
    for product, region in rows.values_list("gpu_product", "region_id").distinct():
        by_product[product].add(region)
    return {o.id: sorted(by_product[o.gpu_model.product]) for o in offerings}


def regions_overview() -> list[dict[str, Any]]:
    """Every active region with, per GPU model it has nodes of, how many GPUs it has on ready
    nodes and how many of them are free now (read the way placement reads them)."""
    models = {model.product: model for model in GpuModel.objects.all()}
    present: dict[str, set[str]] = defaultdict(set)
    for where, product in Node.objects.values_list("region_id", "gpu_product").distinct():
        present[where].add(product)
    result = []
    for region in Region.objects.filter(active=True).order_by("name"):
        gpu_models = []
        for product in sorted(present[region.name] & set(models), key=lambda p: models[p].id):
            nodes, taken, _rooms, _regions = capacity(product, region.name)
            total = sum(count for _id, _name, count in nodes)
            free = sum(max(count - len(taken[node_id]), 0) for node_id, _name, count in nodes)
            model = models[product]
            gpu_models.append({"id": model.id, "name": model.name, "gpus": total, "free": free})
        result.append(
            {"name": region.name, "display_name": region.display_name, "gpu_models": gpu_models}
        )
    return result


def instance_metrics(
    instance: Instance, *, window: timedelta = timedelta(hours=1)
) -> list[dict[str, Any]]:
    """Per-GPU series of the instance's GPUs over the last hour of its current placement."""
    if instance.node_id is None:
        return []
    held = list(
        Allocation.objects.filter(holding_id=instance.id).values_list("gpu_index", "created_at")
    )
    if not held:
        return []
    indices = sorted(index for index, _at in held)
    gpus = {g.index: g for g in Gpu.objects.filter(node_id=instance.node_id, index__in=indices)}
    # From when these GPUs became this instance's: earlier samples are another renter's work.
    # Agents stamp samples in whole seconds, so the second of the placement counts.
    placed_at = min(at for _index, at in held).replace(microsecond=0)
    since = max(timezone.now() - window, placed_at)
    samples = GpuSample.objects.filter(gpu__in=gpus.values(), at__gte=since).order_by("at")
    series: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for sample in samples.values("gpu_id", "at", "util", "mem_used_mb", "temp_c", "power_w"):
        series[sample["gpu_id"]].append(
            {k: sample[k] for k in ("at", "util", "mem_used_mb", "temp_c", "power_w")}
        )
    return [
        {"gpu": index, "uuid": gpus[index].uuid, "samples": series.get(gpus[index].pk, [])}
        for index in indices
        if index in gpus
    ]


# What instances.api.serializers.SHAPE reads from an instance, as (attribute path, column of
# the list query): the one field list the list's raw SQL is built from. A path with a dot is
# read from a related row (offering, node, holding, stop policy, monthly rental), as it is on an
# Instance; an instance without a monthly rental has `rental` None (Instance.rental).
INSTANCE_COLUMNS = (
    ("id", "i.id"),
    ("name", "i.name"),
    ("status", "i.status"),
    ("offering_id", "i.offering_id"),
    ("image_id", "i.image_id"),
    ("billing", "i.billing"),
    ("created_at", "i.created_at"),
    ("started_at", "i.started_at"),
    ("ssh_port", "i.ssh_port"),
    ("ports", "i.ports"),
    ("ssh_host_key_fingerprint", "i.ssh_host_key_fingerprint"),
    ("cost_fen", "i.cost_fen"),
    ("node_id", "i.node_id"),
    ("region_id", "i.region_id"),
    ("error_message", "i.error_message"),
    ("rental.paid_until", "m.paid_until"),
    ("rental.auto_renew", "m.auto_renew"),
    ("auto_recover", "i.auto_recover"),
    ("mirrors", "i.mirrors"),
    ("stop_policy.idle_stop_util_pct", "sp.idle_stop_util_pct"),
    ("stop_policy.idle_stop_minutes", "sp.idle_stop_minutes"),
    ("stop_policy.idle_stop_due_at", "sp.idle_stop_due_at"),
    ("stop_policy.stop_at", "sp.stop_at"),
    ("offering.gpu_model_id", "o.gpu_model_id"),
    ("offering.gpu_count", "o.gpu_count"),
    ("offering.price_per_hour_fen", "o.price_per_hour_fen"),
    ("offering.cpu_only_price_per_hour_fen", "o.cpu_only_price_per_hour_fen"),
    ("offering.system_disk_gb", "o.system_disk_gb"),
    ("offering.spot_price_per_hour_fen", "o.spot_price_per_hour_fen"),
    ("stop_reason", "i.stop_reason"),
    ("node.name", "n.name"),
    ("holding.gpus_attached", "h.gpus_attached"),
)
_JSON = {"ports"}
LIST_SQL = """
SELECT {columns}, COUNT(*) OVER () AS total
FROM instances_instance i
JOIN instances_offering o ON o.id = i.offering_id
JOIN compute_holding h ON h.id = i.id
JOIN instances_stoppolicy sp ON sp.instance_id = i.id
LEFT JOIN instances_monthlyrental m ON m.instance_id = i.id
LEFT JOIN instances_node n ON n.id = i.node_id
WHERE i.tenant_id = %(tenant)s {status}
ORDER BY i.created_at DESC, i.id
LIMIT %(limit)s OFFSET %(offset)s
"""
# The page's two statements, without and with the status filter: (prepared name, SQL).
PAGE_STATEMENTS = {
    with_status: (
        "sv_instance_page_status" if with_status else "sv_instance_page",
        LIST_SQL.format(
            columns=", ".join(column for _path, column in INSTANCE_COLUMNS),
            status="AND i.status = %(status)s" if with_status else "",
        ),
    )
    for with_status in (False, True)
}

PAGE_DISKS_SQL = (
    "SELECT instance_id, id FROM instances_disk WHERE instance_id = ANY(%(ids)s) ORDER BY name"
)


def _json(value: Any) -> Any:
    # JSON comes back as text (Django decodes a JSONField itself); most instances have no ports
    if not isinstance(value, str):
        return value
    return [] if value == "[]" else json.loads(value)


# INSTANCE_COLUMNS read once: which values are JSON text to decode (the driver hands back the
# rest as the ORM would), and which belong to a related row.
_JSON_AT = [index for index, (path, _column) in enumerate(INSTANCE_COLUMNS) if path in _JSON]
_FLAT = [(index, path) for index, (path, _column) in enumerate(INSTANCE_COLUMNS) if "." not in path]


def _related_columns() -> dict[str, list[tuple[int, str]]]:
    related: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for index, (path, _column) in enumerate(INSTANCE_COLUMNS):
        owner, dot, name = path.partition(".")
        if dot:
            related[owner].append((index, name))
    return dict(related)


_RELATED = _related_columns()
_OPTIONAL = {"rental"}


def _row(values: tuple[Any, ...]) -> Any:
    """One row of the list query, shaped like an Instance for the attributes SHAPE reads."""
    row = list(values)
    for index in _JSON_AT:
        row[index] = _json(row[index])
    item = SimpleNamespace(**{name: row[index] for index, name in _FLAT})
    for owner, names in _RELATED.items():
        columns = {name: row[index] for index, name in names}
        # an optional row the LEFT JOIN did not find (a rental's auto_renew is never NULL)
        absent = owner in _OPTIONAL and all(value is None for value in columns.values())
        setattr(item, owner, None if absent else SimpleNamespace(**columns))
    return item


def instance_page(
    tenant_id: str, *, status: str | None, limit: int, offset: int
) -> tuple[int | None, list[Any]]:
    """One page of a tenant's instances, newest first, with the total count, in one query and
    the attached disks in a second: the instance list is the API's hottest read, and building
    these queries through the ORM cost more than running them. Both are prepared statements on
    PostgreSQL (starverse.core.db.execute_prepared): planned on every call, the page's three
    tables and window cost PostgreSQL about four times what running it does. Rows are shaped like
    Instance for InstanceOutput (offering, node and attached_disks included). The count is None
    when the page is past the end."""
    params = {"tenant": tenant_id, "limit": limit, "offset": offset}
    if status:
        params["status"] = status
    with connection.cursor() as cursor:
        name, sql = PAGE_STATEMENTS[bool(status)]
        execute_prepared(cursor, name, sql, params)
        fetched = cursor.fetchall()
        total = fetched[0][-1] if fetched else None
        items = [_row(values[:-1]) for values in fetched]
        disks: dict[str, list[Any]] = defaultdict(list)
        if items:
            ids = [item.id for item in items]
            # one array: the same statement for any page
            execute_prepared(cursor, "sv_instance_page_disks", PAGE_DISKS_SQL, {"ids": ids})
            for instance_id, disk_id in cursor.fetchall():
                disks[instance_id].append(SimpleNamespace(id=disk_id))
    for item in items:
        item.attached_disks = disks.get(item.id, [])
    return total, items


def queue_positions(instances: list[Any]) -> dict[str, int]:
    """Each queued instance's place in the line for its GPU product (1 = next), for a whole
    page in one query (compute.queue.positions: the queue's own rule, regions included)."""
    return positions([i.id for i in instances if i.status == InstanceStatus.QUEUED])


def spend_per_hour_fen(
    tenant_ids: list[str] | None = None,
    *,
    starting: bool = False,
    exclude: str = "",
    exclude_gang: str = "",
    trial: bool = False,
) -> dict[str, int]:
    """What each tenant's instances burn from its balance per hour right now: the hourly price
    of its running pay-as-you-go instances (the no-GPU price of those in no-GPU mode;
    per-minute billing, so it is right from the first minute; a monthly rental is prepaid and
    burns nothing). The one definition of spend rate:
    the dashboard shows it and the runway warnings use it. With `starting`, also the instances
    placed and provisioning, which burn from their first running minute (what a runway must
    cover); `exclude` leaves out one instance (the one whose runway is checked), and
    `exclude_gang` the members of one gang (a cluster's ranks). With `trial`, at the trial
    prices, of the instances whose offering has one (what they would burn of trial credit)."""
    rows = spend_rows(tenant_ids, starting=starting, exclude=exclude, exclude_gang=exclude_gang)
    return {tenant: fen for tenant, cash, at_trial in rows if (fen := at_trial if trial else cash)}


_SPEND_SQL = """
SELECT i.tenant_id,
       CAST(SUM({price}) AS BIGINT),
       CAST(SUM({trial_price}) AS BIGINT)
  FROM {instance} i JOIN {offering} o ON o.id = i.offering_id
  JOIN {holding} h ON h.id = i.id
 WHERE i.status IN ({statuses}) AND i.billing IN (%(hourly)s, %(spot)s) {tenants}
   AND i.id <> %(exclude)s AND (%(gang)s = '' OR h.gang <> %(gang)s)
 GROUP BY i.tenant_id
"""


def spend_rows(
    tenant_ids: list[str] | None = None,
    *,
    starting: bool = False,
    exclude: str = "",
    exclude_gang: str = "",
) -> list[tuple[str, int | None, int | None]]:
    """spend_per_hour_fen's figures, at the standard and at the trial prices together, per
    tenant: (tenant_id, fen an hour, fen an hour at trial prices), either None when no
    instance counts. One plain statement (prepared for one tenant: a runway reads it under the
    wallet lock of every order, and building it through the ORM cost more than running it)."""
    if tenant_ids is not None and not tenant_ids:
        return []
    sql, params = _spend_statement(
        tenant_ids, starting=starting, exclude=exclude, exclude_gang=exclude_gang
    )
    with connection.cursor() as cursor:
        if tenant_ids is not None and len(tenant_ids) == 1:
            execute_prepared(cursor, f"sv_spend_{int(starting)}", sql, params)
        else:
            cursor.execute(sql, params)
        return list(cursor.fetchall())


def _spend_statement(
    tenant_ids: list[str] | None, *, starting: bool, exclude: str, exclude_gang: str
) -> tuple[str, dict[str, Any]]:
    statuses = STARTING_OR_RUNNING if starting else (S.RUNNING,)
    params: dict[str, Any] = {
        "hourly": BillingMode.HOURLY,
        "spot": BillingMode.SPOT,
        "exclude": exclude,
    }
    params["gang"] = exclude_gang
    params.update({f"s{n}": status for n, status in enumerate(statuses)})
    tenants = ""
    if tenant_ids is not None:
        tenants = "AND i.tenant_id IN ({})".format(
            ", ".join(f"%(t{n})s" for n in range(len(tenant_ids)))
        )
        params.update({f"t{n}": tenant for n, tenant in enumerate(tenant_ids)})
    sql = _SPEND_SQL.format(
        price=hour_price_sql(offering="o", billing="i.billing", gpus_attached="h.gpus_attached"),
        trial_price=hour_price_sql(
            offering="o", billing="i.billing", gpus_attached="h.gpus_attached", trial=True
        ),
        instance=Instance._meta.db_table,
        holding=Holding._meta.db_table,
        offering=Offering._meta.db_table,
        statuses=", ".join(f"%(s{n})s" for n in range(len(statuses))),
        tenants=tenants,
    )
    return sql, params


# a queued gang (a cluster) is one order, whatever its node count; an instance in no-GPU mode
# on a node of its own choosing (cpu_node) holds no GPUs (a monthly one keeps its own: counted)
_USAGE_SQL = """
SELECT COUNT(*) FILTER (WHERE i.status = %(queued)s AND h.gang = '')
         + COUNT(DISTINCT NULLIF(h.gang, '')) FILTER (WHERE i.status = %(queued)s),
       COALESCE(SUM(o.gpu_count) FILTER (WHERE h.cpu_node_id IS NULL), 0),
       COALESCE(SUM(o.gpu_count) FILTER (WHERE m.premium AND h.cpu_node_id IS NULL), 0)
  FROM {instance} i
  JOIN {holding} h ON h.id = i.id
  JOIN {offering} o ON o.id = i.offering_id
  JOIN {gpu_model} m ON m.id = o.gpu_model_id
 WHERE i.tenant_id = %(tenant)s AND i.status IN ({statuses})
"""


def tenant_usage(tenant_id: str) -> Usage:
    sql, params = _usage_statement(tenant_id)
    with connection.cursor() as cursor:
        execute_prepared(cursor, "sv_usage", sql, params)
        queued, gpus, premium = cursor.fetchone()
    return Usage(queued=int(queued), gpus=int(gpus), premium_gpus=int(premium))


def _usage_statement(tenant_id: str) -> tuple[str, dict[str, Any]]:
    statuses = (*HOLDS_GPUS, S.QUEUED)
    sql = _USAGE_SQL.format(
        instance=Instance._meta.db_table,
        holding=Holding._meta.db_table,
        offering=Offering._meta.db_table,
        gpu_model=GpuModel._meta.db_table,
        statuses=", ".join(f"%(u{n})s" for n in range(len(statuses))),
    )
    params: dict[str, Any] = {"queued": S.QUEUED, "tenant": tenant_id}
    params.update({f"u{n}": status for n, status in enumerate(statuses)})
    return sql, params


# spend_rows, tenant_usage, tenant_limits and the budgets of instances.budgets in one statement
# (their own SQL, composed): an order reads them all, and each round trip costs both sides CPU.
_ADMISSION_SQL = """
SELECT s.cash, s.trial, u.queued, u.gpus, u.premium,
       l.max_queued_orders, l.max_running_gpus, l.trial_max_premium_gpus,
       (SELECT json_agg(json_build_array(b.user_id, b.monthly_fen) ORDER BY b.id)
          FROM ({budgets}) b)
  FROM ({usage}) u(queued, gpus, premium)
  LEFT JOIN ({spend}) s(tenant_id, cash, trial) ON TRUE
  LEFT JOIN {limits} l ON l.tenant_id = %(tenant)s
"""


def admission_reads(
    tenant_id: str, user_id: str, *, exclude: str, exclude_gang: str = ""
) -> AdmissionReads:
    """AdmissionReads for an order of `user_id` in `tenant_id` (`exclude`: the order's own
    instance; `exclude_gang`: its gang's members, a cluster's ranks), by one prepared statement."""
    usage_sql, params = _usage_statement(tenant_id)
    spend_sql, spend_params = _spend_statement(
        [tenant_id], starting=True, exclude=exclude, exclude_gang=exclude_gang
    )
    sql = _ADMISSION_SQL.format(
        usage=usage_sql,
        spend=spend_sql,
        budgets=budgets_sql(),
        limits=TenantLimits._meta.db_table,
    )
    with connection.cursor() as cursor:
        execute_prepared(cursor, "sv_admission", sql, {**params, **spend_params, "user": user_id})
        row = cursor.fetchone()
    cash, trial, queued, gpus, premium, own_queued, own_gpus, own_premium, budgets = row
    if isinstance(budgets, str):
        budgets = json.loads(budgets)
    return AdmissionReads(
        burn_fen=cash or 0,
        trial_burn_fen=trial or 0,
        limits=limits_of(own_queued, own_gpus, own_premium),
        usage=Usage(queued=int(queued), gpus=int(gpus), premium_gpus=int(premium)),
        budgets=[(user, int(fen)) for user, fen in budgets or []],
    )


def calculator_offerings() -> list[Offering]:
    """The offerings the cost calculator may price: the active catalog, as Rent lists it."""
    return list(Offering.objects.filter(active=True).select_related("gpu_model"))


def calculator_offering(key: str) -> CatalogPrice | None:
    """An active offering by slug or id, as the calculator prices it (its name in the reader's
    language); None when there is no such offering."""
    offering = (
        Offering.objects.filter(active=True).filter(Q(slug=key) | Q(pk=key)).order_by("pk").first()
    )
    if offering is None:
        return None
    return CatalogPrice(
        id=offering.id,
        slug=offering.slug,
        name=localized(offering, "name"),
        gpus=offering.gpu_count,
        price_per_hour_fen=offering.price_per_hour_fen,
        price_per_month_fen=offering.price_per_month_fen,
    )


def instances_live_of(*, tenant_id: str, created_by_id: str) -> int:
    """How many of the tenant's instances `created_by_id` ordered have a pod now (their access
    Secrets are rendered from the orderer's keys)."""
    return Instance.objects.filter(
        tenant_id=tenant_id, created_by_id=created_by_id, status__in=STARTING_OR_RUNNING
    ).count()


ORDERER_COLUMNS = ("id", "name", "offering__gpu_count", "created_by_id", "created_by__email")


def instances_named(ids: set[str]) -> dict[str, Resource]:
    """The instances (and cluster ranks) among `ids`, as usage reports name them
    (billing.usage.resource_namer_register, from instances.apps)."""
    rows = Instance.objects.filter(pk__in=ids).values_list(*ORDERER_COLUMNS)
    return {
        pk: Resource(f"{name} ({pk})", gpus, str(user_id), email)
        for pk, name, gpus, user_id, email in rows
    }


@dataclass(frozen=True)
class PriceNow:
    """What an hour of an offering is charged now: at its trial price while the wallet's free
    trial credit pays its minutes (about `trial_minutes` of them left, for it alone), then at
    the standard price from cash (`after_fen`). Monthly billing is paid from cash only."""

    fen: int
    trial: bool = False
    trial_minutes: int = 0
    after_fen: int = 0


def offering_price_now(
    offering: Offering, promo_free_fen: int, *, billing: str = BillingMode.HOURLY, count: int = 1
) -> PriceNow:
    """An hour of `count` of the offering (a cluster's nodes) as charged now, for a wallet
    with `promo_free_fen` of free trial credit: the one rule the instance page, Rent and the
    cluster order form show."""
    trial_price = offering.trial_price_per_hour_fen
    if billing == BillingMode.HOURLY and trial_price is not None and promo_free_fen > 0:
        return PriceNow(
            fen=trial_price * count,
            trial=True,
            trial_minutes=trial_minutes(promo_free_fen, trial_price * count),
            after_fen=offering.price_per_hour_fen * count,
        )
    spot = offering.spot_price_per_hour_fen
    if billing == BillingMode.SPOT and spot is not None:
        return PriceNow(fen=spot * count)  # in cash only
    return PriceNow(fen=offering.price_per_hour_fen * count)
