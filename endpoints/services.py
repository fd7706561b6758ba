"""Every write of the endpoints app: serving a model (validated here, synchronously, naming
the field at fault), scaling it, updating its snapshot, its API keys, deleting it. The cluster
is converged to the rows by the worker afterwards (endpoints.provisioning); GPUs are held per
replica by the scheduler (endpoints.scheduler). In a team an endpoint is an order like an
instance: the billing role serves nothing, and its creator's and the team's monthly budgets
(instances.budgets) count its charges, refuse what does not fit and scale it to zero once
spent."""

import hashlib
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from compute.admission import admit
from compute.choices import OfferingKind
from compute.metering import meter_close
from compute.models import Offering
from compute.orders import Order, OrderKey, order_commit, ordered_before, request_hash_of
from datasets.choices import DatasetKind
from datasets.models import PublicDataset
from endpoints.choices import ENDED, LIVE, EndpointStatus, SourceKind
from endpoints.engines import engine_validate
from endpoints.models import Endpoint, EndpointKey, EndpointReplica
from instances.budgets import budgets_spent
from instances.lifecycle import catalog_offering
from starverse.accounts.models import User
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, InvalidInput, NotFound
from starverse.core.roles import may_use, require_orderer, require_own_or_manager
from storage.choices import DiskStatus
from storage.models import Disk, SharedStorage

logger = logging.getLogger(__name__)
S = EndpointStatus
GPU_COUNTS = (1, 2, 4, 8)
MAX_REPLICAS = 32
KEY_PREFIX = "sk-sv-"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
PUBLIC_MODELS = "/public/models/"


@dataclass(frozen=True)
class Source:
    kind: str
    disk: Disk | None = None
    claim: str = ""
    path: str = ""
    dataset: str = ""


def _relative(path: Any, field: str) -> str:
    """A folder inside the source: relative, without '..', or the source's root."""
    if not isinstance(path, str):
        raise InvalidInput(_("A folder path is text."), field=field)
    parts = [p for p in path.strip().strip("/").split("/") if p not in ("", ".")]
    if path.strip().startswith("/") or ".." in parts or "\\" in path or len(path) > 500:
        raise InvalidInput(
            _("%(field)s must be a folder relative to the source, without '..'.")
            % {"field": field},
            code="invalid_path",
            field=field,
        )
    return "/".join(parts)


def source_resolve(user: User, source: Any) -> Source:
    """The source a request names, checked now where it can be: the disk is the tenant's, live
    and the user's to use as an order's disks are (in a team, a member's own; owners' and
    admins' any: 403 `not_yours`), the NAS exists, the public-pool entry is a model. Whether a
    disk's folder holds a model only a pod can see: the engine's init checks it and fails the
    endpoint naming source.path."""
    tenant_id = user.tenant_id
    if not isinstance(source, dict):
        raise InvalidInput(_("source must be an object."), field="source")
    named = [key for key in ("disk", "nas_path", "dataset") if source.get(key) not in (None, "")]
    if len(named) != 1:
        raise InvalidInput(
            _("source names exactly one of disk, nas_path or dataset."),
            code="invalid_source",
            field="source",
        )
    if named[0] == "disk":
        disk = Disk.objects.filter(tenant_id=tenant_id, pk=str(source["disk"])).first()
        if disk is None or disk.status == DiskStatus.DELETED:
            raise InvalidInput(
                _("No disk %(id)s.") % {"id": source["disk"]},
                code="disk_not_found",
                field="source.disk",
            )
        require_own_or_manager(user, disk)
        if disk.status not in (DiskStatus.AVAILABLE, DiskStatus.ATTACHED) or not disk.k8s_name:
            raise InvalidInput(
                _("Disk %(id)s is not ready yet.") % {"id": disk.pk},
                code="disk_not_ready",
                field="source.disk",
            )
        path = _relative(source.get("path", ""), "source.path")
        return Source(SourceKind.DISK, disk=disk, claim=disk.k8s_name, path=path)
    if named[0] == "nas_path":
        nas = SharedStorage.objects.live().filter(tenant_id=tenant_id).first()
        if nas is None or not nas.k8s_name:
            raise InvalidInput(
                _("Your account has no shared NAS."), code="no_nas", field="source.nas_path"
            )
        path = _relative(source["nas_path"], "source.nas_path")
        return Source(SourceKind.NAS, claim=nas.k8s_name, path=path)
    wanted = str(source["dataset"]).strip()
    if wanted.startswith(PUBLIC_MODELS):
        rows = PublicDataset.objects.filter(directory=wanted[len(PUBLIC_MODELS) :].strip("/"))
    else:
        rows = PublicDataset.objects.filter(pk=wanted)
    found = rows.filter(active=True).first()
    if found is None or found.kind != DatasetKind.MODEL:
        raise InvalidInput(
            _("%(name)s is not a model of the public pool.") % {"name": wanted},
            code="not_a_model",
            field="source.dataset",
        )
    return Source(SourceKind.DATASET, path=found.directory, dataset=found.pk)


def _offering(offering_id: str) -> Offering:
    offering = catalog_offering(offering_id)
    if (
        offering is None
        or offering.kind != OfferingKind.CLOUD
        or offering.gpu_count not in GPU_COUNTS
    ):
        raise InvalidInput(
            _("Unknown offering %(id)s: endpoints run on cloud GPU offerings of 1, 2, 4 or 8 GPUs.")
            % {"id": offering_id},
            code="unknown_offering",
            field="offering",
        )
    return offering


def replicas_validate(low: Any, high: Any) -> tuple[int, int]:
    for field, value in (("min_replicas", low), ("max_replicas", high)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPLICAS:
            raise InvalidInput(
                _("%(field)s must be a whole number from 0 to %(max)d.")
                % {"field": field, "max": MAX_REPLICAS},
                field=field,
            )
    if high < 1 or high < low:
        raise InvalidInput(
            _("max_replicas must be at least 1 and at least min_replicas."), field="max_replicas"
        )
    return low, high


def endpoint_gpus(tenant_id: str, exclude: str = "") -> int:
    """GPUs the tenant's live endpoints may hold at their maximum."""
    total = (
        Endpoint.objects.filter(tenant_id=tenant_id)
        .exclude(status__in=ENDED)
        .exclude(pk=exclude)
        .exclude(suspended=True)
        .aggregate(gpus=Sum(F("max_replicas") * F("offering__gpu_count"), default=0))["gpus"]
    )
    return int(total)


def _order_of(endpoint: Endpoint, *, low: int, high: int, key: OrderKey | None = None) -> Order:
    """An endpoint of `low` to `high` replicas, as its admission (compute.admission.admit)
    reads it: its runway is an hour of one replica (of the minimum, when more) in cash, as
    replicas are billed from cash at the standard price (trial credit pays only instances'
    trial prices), without what the tenant's instances burn; the account's GPU limit counts
    every replica it may scale to, with what the tenant's instances hold and its other
    endpoints may scale to."""
    return Order(
        product="endpoint",
        tenant_id=endpoint.tenant_id,
        created_by_id=endpoint.created_by_id,
        offering=endpoint.offering,
        gpus=high * endpoint.offering.gpu_count,
        units=max(1, low),
        key=key,
        pk=endpoint.pk,
        in_usage=False,
        burns_with_others=False,
        trial_credit=False,
        held_elsewhere=lambda: endpoint_gpus(endpoint.tenant_id, exclude=endpoint.pk),
    )


def endpoint_create(
    *,
    user: User,
    name: str,
    source: Any,
    engine: str,
    offering_id: str,
    min_replicas: int,
    max_replicas: int,
    engine_options: Any = None,
    idempotency_key: str = "",
) -> tuple[Endpoint, bool]:
    """Serve a model. Returns (endpoint, created); the same Idempotency-Key answers the same
    endpoint, and a different request under it is a 409. It is admitted as an order
    (_order_of): its runway (an hour of `max(1, min_replicas)` replicas) must fit the cash
    and, in a team, what is left of the creator's and the team's monthly budgets (402
    `budget_exceeded`)."""
    require_orderer(user)
    request_hash = request_hash_of(
        name=name,
        source=source,
        engine=engine,
        offering=offering_id,
        min=min_replicas,
        max=max_replicas,
        options=engine_options or {},
    )
    key = OrderKey(user.tenant_id, idempotency_key, request_hash)
    if (earlier := ordered_before(Endpoint.objects.all(), key, "endpoint")) is not None:
        return earlier, False
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(
            _("name: 1–63 letters, digits, '.', '_' or '-' (it is the served model's name)."),
            field="name",
        )
    offering = _offering(offering_id)
    options = engine_validate(engine, engine_options or {}, offering.gpu_count)
    low, high = replicas_validate(min_replicas, max_replicas)
    found = source_resolve(user, source)

    def create_once() -> Endpoint:
        endpoint = _endpoint_new(user, key, name, offering, engine, options, found, low, high)
        admit(_order_of(endpoint, low=low, high=high, key=key))
        endpoint.save()
        enqueue_on_commit("endpoints.tasks.converge_endpoint", endpoint.id)
        return endpoint

    endpoint, created = order_commit(Endpoint.objects.all(), key, "endpoint", create_once)
    if created:
        logger.info("endpoint.created endpoint=%s tenant=%s", endpoint.id, user.tenant_id)
    return endpoint, created


def _endpoint_new(
    user: User,
    key: OrderKey,
    name: str,
    offering: Offering,
    engine: str,
    options: Any,
    found: Source,
    low: int,
    high: int,
) -> Endpoint:
    """A new endpoint's row (unsaved), its request checked."""
    return Endpoint(
        tenant_id=user.tenant_id,
        created_by=user,
        name=name,
        offering=offering,
        engine=engine,
        engine_options=options,
        source_kind=found.kind,
        source_disk=found.disk,
        source_claim=found.claim,
        source_path=found.path,
        source_dataset=found.dataset,
        min_replicas=low,
        max_replicas=high,
        replicas_desired=low,
        idempotency_key=key.idempotency_key,
        request_hash=key.request_hash,
    )


def endpoint_locked(endpoint_id: str) -> Endpoint:
    return Endpoint.objects.select_for_update().get(pk=endpoint_id)


def endpoint_change(
    *,
    endpoint: Endpoint,
    min_replicas: int | None = None,
    max_replicas: int | None = None,
    engine_options: Any = None,
    update: bool = False,
    actor: User | None = None,
) -> Endpoint:
    """Scale (min/max, at once: the autoscaler's bounds and the Deployment follow), change
    engine options, or update (a new snapshot of the source; the replicas roll one by one): an
    update of a disk's model needs that disk to be the `actor`'s to use, as at creation.
    Scaling up an endpoint the balance or a budget suspended lifts the suspension if the
    balance covers an hour of it; raising its minimum, or lifting a suspension, needs that hour
    to fit its creator's and its team's monthly budgets (402 `budget_exceeded`)."""
    with transaction.atomic():
        locked = endpoint_locked(endpoint.id)
        if locked.status in ENDED:
            raise Conflict(_("This endpoint is being deleted."), code="wrong_state")
        if update and actor is not None and locked.source_disk is not None:
            require_own_or_manager(actor, locked.source_disk)
        low = locked.min_replicas if min_replicas is None else min_replicas
        high = locked.max_replicas if max_replicas is None else max_replicas
        low, high = replicas_validate(low, high)
        options = locked.engine_options
        if engine_options is not None:
            options = engine_validate(locked.engine, engine_options, locked.offering.gpu_count)
        fields = ["min_replicas", "max_replicas"]
        _scale_admit(locked, low, high)
        if locked.suspended:
            locked.suspended = False
            fields.append("suspended")
        locked.min_replicas, locked.max_replicas = low, high
        if options != locked.engine_options or update:
            locked.engine_options = options
            if update and locked.source_kind != SourceKind.DATASET:
                locked.generation += 1
            locked.status = S.UPDATING
            locked.error_message = ""  # a failure (no model) is tried again
            fields += ["engine_options", "generation", "status", "error_message"]
        locked.save(update_fields=fields)
        enqueue_on_commit("endpoints.tasks.converge_endpoint", locked.id)
    logger.info(
        "endpoint.changed endpoint=%s min=%d max=%d update=%s", locked.id, low, high, update
    )
    return locked


def _scale_admit(locked: Endpoint, low: int, high: int) -> None:
    """Lifting a suspension is a start, admitted as an order but for the hold; scaling up meets
    again only what it raises: the GPU limit for a higher maximum, the budgets for a higher
    minimum."""
    limits = high > locked.max_replicas or locked.suspended
    budgets = low > locked.min_replicas or locked.suspended
    if limits or budgets:
        order = _order_of(locked, low=low, high=high)
        admit(order, hold=False, runway=locked.suspended, budgets=budgets, limits=limits)


def endpoint_suspend(*, endpoint_id: str, reason: str = "") -> bool:
    """The balance ran out (or a budget, `reason` saying which): scale to zero, keeping
    settings and snapshot (never delete)."""
    with transaction.atomic():
        locked = endpoint_locked(endpoint_id)
        if locked.suspended or locked.status in ENDED:
            return False
        locked.suspended = True
        locked.status = S.SCALED_TO_ZERO
        locked.error_message = reason or _(
            "Balance exhausted: scaled to zero (settings and snapshot kept). Top up, then scale "
            "it up again."
        )
        locked.save(update_fields=["suspended", "status", "error_message"])
        enqueue_on_commit("endpoints.tasks.converge_endpoint", locked.id)
    logger.info("endpoint.suspended endpoint=%s", endpoint_id)
    return True


def endpoints_over_budget_suspend(*, now: datetime | None = None) -> list[str]:
    """Scale to zero, as an empty wallet does, the serving endpoints of every member whose
    monthly budget is spent (of the whole team, when the team's is), the reason on the
    endpoint. Returns their ids."""
    serving = Endpoint.objects.filter(status__in=LIVE, suspended=False)
    suspended: list[str] = []
    for tenant_id, user_id in budgets_spent(now=now, tenants=serving.values("tenant_id")):
        rows = serving.filter(tenant_id=tenant_id).select_related("tenant", "created_by")
        if user_id is not None:
            rows = rows.filter(created_by_id=user_id)
        for endpoint in rows:
            if user_id is None:
                reason = _(
                    "The monthly budget of team %(team)s is spent: scaled to zero (settings and "
                    "snapshot kept). Scale it up again once an owner raises the budget or a new "
                    "month begins."
                ) % {"team": endpoint.tenant.name}
            else:
                reason = _(
                    "The monthly budget of %(who)s in team %(team)s is spent: scaled to zero "
                    "(settings and snapshot kept). Scale it up again once an owner raises the "
                    "budget or a new month begins."
                ) % {"who": endpoint.created_by.email, "team": endpoint.tenant.name}
            if endpoint_suspend(endpoint_id=endpoint.id, reason=reason):
                suspended.append(endpoint.id)
    if suspended:
        logger.info("endpoint.budget_suspends endpoints=%d", len(suspended))
    return suspended


def endpoint_delete(*, endpoint: Endpoint) -> Endpoint:
    """Deleting: its keys stop passing and its replicas stop billing now, as an instance's
    termination does (the minute in progress paid), not when their pods are found gone, which a
    lost task or a stopped beat can delay by minutes; the scheduler opens no session for a
    deleting endpoint's replica (endpoints.scheduler._follow)."""
    with transaction.atomic():
        locked = endpoint_locked(endpoint.id)
        if locked.status in ENDED:
            return locked
        locked.status = S.DELETING
        locked.save(update_fields=["status"])
        now = timezone.now()
        serving = EndpointReplica.objects.filter(
            endpoint=locked, gone_at__isnull=True, ready_since__isnull=False
        )
        spent = sum(
            meter_close(replica_id, now=now) for replica_id in serving.values_list("pk", flat=True)
        )
        if spent:
            Endpoint.objects.filter(pk=locked.pk).update(cost_fen=F("cost_fen") + spent)
        EndpointKey.objects.filter(endpoint=locked, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        enqueue_on_commit("endpoints.tasks.converge_endpoint", locked.id)
    logger.info("endpoint.deleting endpoint=%s", endpoint.id)
    return locked


def endpoint_fail(*, endpoint_id: str, message: str) -> None:
    Endpoint.objects.filter(pk=endpoint_id).exclude(status__in=ENDED).update(
        status=S.FAILED, error_message=message
    )
    logger.info("endpoint.failed endpoint=%s", endpoint_id)


# --- keys -------------------------------------------------------------------------------------


def key_cache_name(digest: str) -> str:
    """Where the gateway's check keeps a valid key for a few seconds (endpoints.gateway)."""
    return f"endpoint:key:{digest}"


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_create(*, endpoint: Endpoint, name: str, user: User) -> tuple[EndpointKey, str]:
    """A new API key of the endpoint, returned this once (only its hash is kept)."""
    if endpoint.status in ENDED:
        raise Conflict(_("This endpoint is being deleted."), code="wrong_state")
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = EndpointKey.objects.create(
        endpoint=endpoint,
        name=(name or "").strip()[:100] or _("key"),
        prefix=secret[:12],
        key_hash=key_digest(secret),
        created_by=user,
    )
    logger.info("endpoint.key_created endpoint=%s key=%s", endpoint.id, key.id)
    return key, secret


def keys_revoke_unusable(*, tenant_id: str, user_id: str, role: str | None) -> int:
    """Revoke the live keys `user_id` made for the tenant's endpoints that their role (None: no
    longer a member) does not let them use: a removed or demoted member's keys stop passing
    the gateway (within its KEY_CACHE_S) and scale nothing more. The number revoked."""
    live = EndpointKey.objects.filter(
        created_by_id=user_id, endpoint__tenant_id=tenant_id, revoked_at__isnull=True
    ).values_list("id", "key_hash", "endpoint__created_by_id")
    gone = {pk: digest for pk, digest, orderer in live if not may_use(role, user_id, orderer)}
    revoked = EndpointKey.objects.filter(pk__in=list(gone)).update(revoked_at=timezone.now())
    # the gateway's few seconds of memory of them go too, once this has committed
    stale = [key_cache_name(digest) for digest in gone.values()]
    transaction.on_commit(lambda: cache.delete_many(stale))
    if revoked:
        logger.info("endpoint.keys_revoked tenant=%s user=%s n=%d", tenant_id, user_id, revoked)
    return revoked


def key_revoke(*, endpoint: Endpoint, key_id: str) -> EndpointKey:
    revoked = EndpointKey.objects.filter(
        pk=key_id, endpoint=endpoint, revoked_at__isnull=True
    ).update(revoked_at=timezone.now())
    if not revoked:
        raise NotFound(_("No key %(id)s on this endpoint.") % {"id": key_id}, code="key_not_found")
    logger.info("endpoint.key_revoked endpoint=%s key=%s", endpoint.id, key_id)
    return EndpointKey.objects.get(pk=key_id)
