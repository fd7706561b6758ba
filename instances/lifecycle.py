"""Instance lifecycle: ordering (runway check, idempotency, placement or the queue), the state
machine, stop / start / terminate, and serving the queue as capacity frees."""

import hashlib
import json
import logging
import time
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing.selectors import wallet_for_tenant
from fleet.choices import NodeState
from fleet.models import Node
from instances.choices import (
    HOLDS_GPUS,
    INSTANCE_TRANSITIONS,
    BillingMode,
    InstanceStatus,
    OfferingKind,
)
from instances.models import Image, Instance, InstanceEvent, Offering
from instances.monthly import period_active, period_charge
from instances.placement import allocate, choose, release
from instances.volumes import disks_attach_at_order
from starverse.core.errors import Conflict, IdempotencyConflict, InsufficientBalance, InvalidInput
from starverse.core.money import format_fen
from starverse.core.text import Deferred, later

logger = logging.getLogger(__name__)
S = InstanceStatus


def instance_transition(instance: Instance, to: str, message: str, **fields: Any) -> Instance:
    """The one way an instance changes status: checked against the transition table, saved with
    update_fields, and recorded as an event. Call inside a transaction holding the row lock."""
    if to not in INSTANCE_TRANSITIONS[instance.status]:
        raise Conflict(
            _("This instance is %(state)s; that is not possible now.")
            % {"state": InstanceStatus(instance.status).label.lower()},
            code="wrong_state",
        )
    instance.status = to
    for key, value in fields.items():
        setattr(instance, key, value)
    instance.save(update_fields=["status", *fields])
    InstanceEvent.objects.create(instance=instance, status=to, message=message)
    logger.info("instance.status instance=%s status=%s", instance.id, to)
    return instance


def runway_check(*, tenant_id: str, offering: Offering, billing: str) -> None:
    """Starting needs at least one hour of the instance's price (a month for monthly)."""
    need = (
        offering.price_per_month_fen
        if billing == BillingMode.MONTHLY
        else offering.price_per_hour_fen
    )
    have = wallet_for_tenant(tenant_id).total_fen
    if have < (need or 0):
        raise InsufficientBalance(
            _(
                "Your balance of %(have)s does not cover %(need)s (one %(unit)s of this instance). "
                "Top up to continue."
            )
            % {
                "have": format_fen(have),
                "need": format_fen(need or 0),
                "unit": _("month") if billing == BillingMode.MONTHLY else _("hour"),
            }
        )


def _queued_ahead(product: str) -> Q:
    return Q(status=S.QUEUED, offering__gpu_model__product=product)


def _own_keys(user: Any, key_ids: list[str]) -> list[str]:
    from starverse.accounts.models import SshKey

    found = set(
        SshKey.objects.filter(user__tenant_id=user.tenant_id, pk__in=key_ids).values_list(
            "pk", flat=True
        )
    )
    missing = [key for key in key_ids if key not in found]
    if missing:
        raise InvalidInput(
            _("Unknown SSH key %(id)s.") % {"id": missing[0]}, code="unknown_ssh_key"
        )
    return list(dict.fromkeys(key_ids))


_CATALOG: dict[tuple[str, str], tuple[float, Any]] = {}
CATALOG_TTL_S = 5.0


def _cached(kind: str, key: str, load: Any) -> Any:
    """Active offerings and images change rarely and are read by every order: each process
    keeps them for a few seconds."""
    now = time.monotonic()
    hit = _CATALOG.get((kind, key))
    if hit is not None and now - hit[0] < CATALOG_TTL_S:
        return hit[1]
    value = load()
    _CATALOG[(kind, key)] = (now, value)
    return value


def catalog_offering(offering_id: str) -> Offering | None:
    return _cached(
        "offering",
        offering_id,
        lambda: (
            Offering.objects.select_related("gpu_model").filter(pk=offering_id, active=True).first()
        ),
    )


def catalog_image(image_id: str) -> Image | None:
    return _cached(
        "image", image_id, lambda: Image.objects.filter(pk=image_id, active=True).first()
    )


def _hash(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def instance_order(
    *,
    user: Any,
    offering_id: str,
    image_id: str,
    name: str = "",
    billing: str = BillingMode.HOURLY,
    idempotency_key: str = "",
    auto_renew: bool = True,
    ssh_keys: list[str] | None = None,
    disks: list[str] | None = None,
    auto_recover: bool | None = None,
) -> tuple[Instance, bool]:
    """Order an instance: place it now, or queue it behind earlier orders for the same GPU.
    Returns (instance, created); the same Idempotency-Key answers the same instance."""
    request = {
        "offering": offering_id,
        "image": image_id,
        "name": name,
        "billing": billing,
        "ssh_keys": sorted(ssh_keys or []),
        **({"disks": sorted(disks)} if disks else {}),
    }
    if idempotency_key:
        found = Instance.objects.filter(
            tenant_id=user.tenant_id, idempotency_key=idempotency_key
        ).first()
        if found is not None:
            if found.request_hash != _hash(request):
                raise IdempotencyConflict(_("This Idempotency-Key was used for a different order."))
            return found, False
    offering = catalog_offering(offering_id)
    if offering is None:
        raise InvalidInput(
            _("Unknown offering %(id)s.") % {"id": offering_id}, code="unknown_offering"
        )
    image = catalog_image(image_id)
    if image is None:
        raise InvalidInput(_("Unknown image %(id)s.") % {"id": image_id}, code="unknown_image")
    if billing == BillingMode.MONTHLY and offering.price_per_month_fen is None:
        raise InvalidInput(_("Monthly billing is offered for whole nodes only."), code="no_monthly")
    key_ids = _own_keys(user, ssh_keys or [])
    runway_check(tenant_id=user.tenant_id, offering=offering, billing=billing)
    try:
        with transaction.atomic():
            instance = Instance(
                tenant_id=user.tenant_id,
                created_by=user,
                offering=offering,
                image=image,
                name=name.strip() or offering.name,
                billing=billing,
                idempotency_key=idempotency_key,
                request_hash=_hash(request),
                queued_at=timezone.now(),
                auto_renew=auto_renew,
                ssh_key_ids=key_ids,
                # Network-backed storage lets a cloud instance move; a whole node is the node.
                auto_recover=(
                    offering.kind == OfferingKind.CLOUD if auto_recover is None else auto_recover
                ),
            )
            events = [InstanceEvent(instance=instance, status=S.QUEUED, message=later("Ordered."))]
            product = offering.gpu_model.product
            queue_ahead = Instance.objects.filter(_queued_ahead(product)).exists()
            placement = None if queue_ahead else choose(offering)
            if placement is not None:
                node = placement[0]
                instance.status, instance.node, instance.queued_at = S.PROVISIONING, node, None
                events.append(
                    InstanceEvent(
                        instance=instance,
                        status=S.PROVISIONING,
                        message=later("Placed on %(node)s.") % {"node": node.name},
                    )
                )
            instance.save(force_insert=True)
            if disks:
                disks_attach_at_order(instance, disks)
            if placement is not None:
                allocate(instance, *placement)
                if billing == BillingMode.MONTHLY:
                    period_charge(instance)  # 402 rolls the whole order back
                _provision_after_commit(instance)
            InstanceEvent.objects.bulk_create(events)
    except IntegrityError:
        if idempotency_key:
            return instance_order(
                user=user,
                offering_id=offering_id,
                image_id=image_id,
                name=name,
                billing=billing,
                idempotency_key=idempotency_key,
                auto_renew=auto_renew,
                ssh_keys=ssh_keys,
                disks=disks,
                auto_recover=auto_recover,
            )
        raise
    return instance, True


def _provision_after_commit(instance: Instance) -> None:
    from instances.tasks import provision_instance

    transaction.on_commit(lambda: provision_instance.delay(instance.id))


def _try_place(instance: Instance, *, fcfs: bool) -> bool:
    product = instance.offering.gpu_model.product
    ahead = _queued_ahead(product) & Q(queued_at__lt=instance.queued_at)
    if fcfs and Instance.objects.filter(ahead).exists():
        return False
    placement = choose(instance.offering)
    if placement is None:
        return False
    node, indices = placement
    if instance.billing == BillingMode.MONTHLY and not period_active(instance):
        try:
            with transaction.atomic():
                period_charge(instance)
        except InsufficientBalance as error:
            instance_transition(
                instance, S.FAILED, error.message, error_message=error.message, queued_at=None
            )
            return True
    allocate(instance, node, indices)
    instance_transition(
        instance,
        S.PROVISIONING,
        later("Placed on %(node)s.") % {"node": node.name},
        node=node,
        queued_at=None,
    )
    _provision_after_commit(instance)
    return True


def queue_position(instance: Instance) -> int | None:
    if instance.status != S.QUEUED or instance.queued_at is None:
        return None
    product = instance.offering.gpu_model.product
    return (
        Instance.objects.filter(_queued_ahead(product), queued_at__lt=instance.queued_at).count()
        + 1
    )


def queue_drain(*, product: str) -> list[str]:
    """Place queued instances for this GPU product, first come first served, until the oldest
    one does not fit."""
    placed = []
    while True:
        with transaction.atomic():
            head = (
                Instance.objects.select_for_update(skip_locked=True)
                .select_related("offering__gpu_model")
                .filter(_queued_ahead(product))
                .order_by("queued_at", "id")
                .first()
            )
            if head is None or not _try_place(head, fcfs=False):
                return placed
            placed.append(head.id)


def _locked(instance_id: str) -> Instance:
    return (
        Instance.objects.select_for_update()
        .select_related("offering__gpu_model")
        .get(pk=instance_id)
    )


def instance_release_gpus(instance: Instance, to: str, message: str, **fields: Any) -> None:
    """Leave a GPU-holding state: give the GPUs back, then serve the queue after commit."""
    release(instance)
    instance_transition(instance, to, message, **fields)
    product = instance.offering.gpu_model.product
    from instances.tasks import drain_queue

    transaction.on_commit(lambda: drain_queue.delay(product))


STOP_REQUESTED = gettext_noop("Stop requested; billing stopped.")


def instance_stop(*, instance_id: str, reason: str = "") -> Instance:
    """Stop billing now (the minute in progress counts as a started minute) and delete the pod;
    the disk is kept."""
    from instances.metering import bill_until

    with transaction.atomic():
        instance = _locked(instance_id)
        if instance.status not in (S.RUNNING, S.PROVISIONING):
            raise Conflict(
                _("Only a running or starting instance can be stopped; this one is %(state)s.")
                % {"state": InstanceStatus(instance.status).label.lower()},
                code="wrong_state",
            )
        if instance.status == S.RUNNING:
            bill_until(instance, timezone.now(), started_minute=True)
        instance_transition(
            instance,
            S.STOPPING,
            reason if isinstance(reason, Deferred) else later(reason or STOP_REQUESTED),
            running_since=None,
        )
    from instances.tasks import stop_instance

    transaction.on_commit(lambda: stop_instance.delay(instance.id))
    return instance


def instance_start(*, instance_id: str) -> Instance:
    with transaction.atomic():
        instance = _locked(instance_id)
        if instance.status not in (S.STOPPED, S.FAILED):
            raise Conflict(_("Only a stopped instance can be started."), code="wrong_state")
        if period_active(instance) and instance.allocations.exists():
            instance_transition(
                instance, S.PROVISIONING, later("Starting on its reserved node (paid monthly).")
            )
            _provision_after_commit(instance)
            return instance
        runway_check(
            tenant_id=instance.tenant_id, offering=instance.offering, billing=instance.billing
        )
        instance_transition(instance, S.QUEUED, later("Start requested."), queued_at=timezone.now())
        _try_place(instance, fcfs=True)
    return instance


def instance_terminate(*, instance_id: str, keep_disk: bool = False) -> Instance:
    """Terminate: the pod, service and secret go; the instance's own disk is deleted unless
    `keep_disk` keeps it as a cloud disk; attached cloud disks are detached, data intact."""
    from instances.metering import bill_until

    with transaction.atomic():
        instance = _locked(instance_id)
        if instance.status in (S.TERMINATED, S.TERMINATING):
            return instance
        if instance.status == S.RUNNING:
            bill_until(instance, timezone.now(), started_minute=True)
        instance_transition(
            instance,
            S.TERMINATING,
            later("Terminate requested."),
            running_since=None,
            queued_at=None,
            keep_disk=keep_disk,
        )
    from instances.tasks import terminate_instance

    transaction.on_commit(lambda: terminate_instance.delay(instance.id))
    return instance


def instances_on_node_changed(*, node_id: str, state: str, reason: str) -> list[str]:
    """Tell every instance on a node what happened to it. A node that is down takes its
    instances with it: they fail (billing stops, GPUs are released) with the reason; on a
    cordoned or draining node they keep running and get an event saying why."""
    node = Node.objects.get(pk=node_id)
    affected = []
    for instance_id in Instance.objects.filter(node=node, status__in=HOLDS_GPUS).values_list(
        "id", flat=True
    ):
        with transaction.atomic():
            instance = _locked(instance_id)
            if instance.status not in HOLDS_GPUS or instance.node_id != node.pk:
                continue
            if state == NodeState.DOWN and instance.auto_recover:
                _recover(instance, node=node, reason=reason)
            elif state == NodeState.DOWN:
                message = later(
                    "The node %(node)s was lost (%(reason)s). Billing stopped at that "
                    "moment; start the instance again to place it on a healthy node."
                ) % {"node": node.name, "reason": reason}
                instance_release_gpus(
                    instance, S.FAILED, message, error_message=message, running_since=None
                )
            else:
                InstanceEvent.objects.create(
                    instance=instance,
                    status=instance.status,
                    message=later(
                        "Its node %(node)s was taken out of service: %(reason)s. The "
                        "instance keeps running."
                    )
                    % {"node": node.name, "reason": reason},
                )
        affected.append(instance_id)
    return affected


def _recover(instance: Instance, *, node: Any, reason: str) -> None:
    """Automatic recovery after node loss: billing pauses now, the GPUs are given back, and the
    instance is placed again, ahead of new orders, on a healthy node with the same disks (they
    are network-backed, so the new pod mounts the same claims)."""
    now = timezone.now()
    paused = timezone.localtime(now).strftime("%Y-%m-%d %H:%M:%S")
    message = later(
        "The node %(node)s was lost (%(reason)s). Billing paused at %(at)s; placing the "
        "instance again on a healthy node with the same disks."
    ) % {"node": node.name, "reason": reason, "at": paused}
    instance_release_gpus(
        instance,
        S.QUEUED,
        message,
        running_since=None,
        provisioning_since=None,
        # first in line for its GPU: it was running before anything now queued was ordered
        queued_at=instance.created_at,
        node=None,
        ssh_port=None,
        jupyter_port=None,
    )
    if not _try_place(instance, fcfs=False):
        InstanceEvent.objects.create(
            instance=instance,
            status=S.QUEUED,
            message=later("No healthy capacity right now; it starts as soon as some frees."),
        )
