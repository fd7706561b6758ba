"""The instance state machine. Every change of an instance's status is one function here, over
one row lock (instance_locked). Each checks the move against INSTANCE_TRANSITIONS, saves the row
with update_fields, writes the InstanceEvent the console shows as progress, and does what the
move means beyond the row:

- leaving a GPU-holding state gives the GPUs back and serves the queue for them after commit;
- leaving running closes the billing session (a stop or terminate counts the started minute);
- entering provisioning, stopping or terminating starts, after commit, the task that carries the
  move out on the cluster (reached by name through starverse.core.dispatch).

Services decide whether an instance moves (the user asked, the balance ran out, a node was
lost); provisioning reports what the cluster did. Functions for a decision take the row the
caller has locked; functions for a report (instance_mark_running, instance_fail,
instance_mark_stopped, instance_mark_terminated, instance_recreate) take the id, lock the row
themselves and ignore a report the instance has already moved past."""

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from compute.choices import HoldingKind
from compute.holdings import (
    holding_gpus_attached_set,
    holding_new,
    holding_place,
    holding_place_cpu_only,
    holding_queue,
    holding_release,
)
from events.choices import EventType
from events.emit import emit_about
from fleet.models import DEFAULT_REGION, Node
from instances.charges import bill_until, meter_start, meters_start, period_active
from instances.choices import HOLDS_GPUS, INSTANCE_TRANSITIONS, InstanceStatus
from instances.gangs import gang_of
from instances.models import Instance, InstanceEvent, PodWatch, Workload, companions_new
from instances.signals import gang_checking, workload_ended, workload_lost
from starverse.core.db import insert_together
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict
from starverse.core.text import later
from storage.disks import disk_adopt, disks_release
from storage.models import Disk

logger = logging.getLogger(__name__)
S = InstanceStatus
# A transition's fields that are the instance's pod watch's (instances.models.PodWatch), not
# its own columns: _transition saves them there.
POD_WATCH_FIELDS = ("provisioning_since", "objects_created_at", "pod_uid")
# How much of a program's last output its instance keeps (the kubelet's termination message is
# at most 4 KiB, 80 lines: the last of them)
WORKLOAD_MESSAGE_CHARS = 4096


def instance_locked(instance_id: str) -> Instance:
    """The instance's row, locked until the transaction ends, with the offering and GPU model
    the transitions read and its companion rows (its stop policy, pod watch and any monthly
    rental: the instance's lock covers them, as they change only under it; those rows are not
    locked themselves). Locks are taken in one order everywhere: the instance, then its GPU
    model (placement), its disks, its wallet (the ledger); so two transactions never wait for
    each other in a circle."""
    return (
        Instance.objects.select_for_update(of=("self",))
        .select_related("offering__gpu_model", "holding", "stop_policy", "pod_watch", "monthly")
        .get(pk=instance_id)
    )


def instance_lock(instance_id: str) -> None:
    """instance_locked's lock alone, for a caller that has read the row already: the same
    row lock, without the row and its companions."""
    list(Instance.objects.select_for_update().filter(pk=instance_id).values_list("pk"))


# A gang's order: its members as they were made (a cluster's ranks in rank order), the id
# breaking a tie. Every service of a gang locks its members in this order, so two never wait
# for each other in a circle.
GANG_ORDER = ("holding__created_at", "pk")


def gang_locked(gang: str) -> list[Instance]:
    """A gang's members (instances.gangs), locked in the gang's order (GANG_ORDER)."""
    return list(
        Instance.objects.select_for_update(of=("self",))
        .select_related("offering__gpu_model", "holding")
        .filter(holding__gang=gang)
        .order_by(*GANG_ORDER)
    )


def instances_locked_skipping(rows: QuerySet[Instance]) -> QuerySet[Instance]:
    """`rows`, locked, without those another transaction holds: one worker at a time works on
    an instance and the others pass it by (the metering tick, the queue)."""
    return rows.select_for_update(skip_locked=True, of=("self",))


def _transition_check(instance: Instance, to: str) -> None:
    if to not in INSTANCE_TRANSITIONS[instance.status]:
        raise Conflict(
            _("This instance is %(state)s; that is not possible now.")
            % {"state": InstanceStatus(instance.status).label.lower()},
            code="wrong_state",
        )


def _transition(instance: Instance, to: str, message: str, **fields: Any) -> Instance:
    """One instance's transition (_transitions). The caller holds the row lock."""
    _transitions([instance], to, message, **fields)
    return instance


def _transitions(instances: list[Instance], to: str, message: str, **fields: Any) -> None:
    """The one transition path, for one instance or several together (a gang's members, in the
    gang's order): each checked against the transition table, a move that ends its running
    ending its metering, saved with update_fields (one UPDATE whatever their number, their pod
    watches' fields by one more), each recorded as an event (inserted at once) and logged. A
    field's value is the same for every instance, or a function of the instance (each from
    its own row: a session's number). The caller holds the rows' locks."""
    for instance in instances:
        _transition_check(instance, to)
    if "running_since" in fields and fields["running_since"] is None:
        # whatever ends its running ends its metering: a path that charged the minute in
        # progress has closed the session already, any other pays its closed minutes
        for instance in instances:
            bill_until(instance, timezone.now(), started_minute=False)
    watch = {key: fields.pop(key) for key in POD_WATCH_FIELDS if key in fields}
    for instance in instances:
        instance.status = to
        for key, value in fields.items():
            setattr(instance, key, value(instance) if callable(value) else value)
    if len(instances) == 1:
        instances[0].save(update_fields=["status", *fields])
    else:
        Instance.objects.bulk_update(instances, ["status", *fields])
    if watch:
        _pod_watches_save(instances, watch)
    InstanceEvent.objects.bulk_create(
        InstanceEvent(instance=instance, status=to, message=message) for instance in instances
    )
    for instance in instances:
        logger.info("instance.status instance=%s status=%s", instance.id, to)


def gpus_release(instance: Instance) -> None:
    """Give the instance's GPUs back (its holding holds none, waits for none); the queue for
    them is served after commit. A session still metering ends first, its closed minutes
    added to the instance's cost."""
    bill_until(instance, timezone.now(), started_minute=False)
    holding_release(instance.id)
    enqueue_on_commit("instances.tasks.drain_queue", instance.offering.gpu_model.product)


def _placed(node: Node) -> str:
    return later("Placed on %(node)s.") % {"node": node.name}


def _pod_watches_save(instances: list[Instance], fields: dict[str, Any]) -> None:
    """A transition's changes to its instances' pod watches, saved in the transition's
    transaction by one UPDATE (and on the rows read with an instance: instance_locked reads
    it with the instance)."""
    PodWatch.objects.filter(instance_id__in=[i.pk for i in instances]).update(**fields)
    for instance in instances:
        if Instance.pod_watch.is_cached(instance):
            for key, value in fields.items():
                setattr(instance.pod_watch, key, value)


def _provisioning_anew(now: datetime | None = None) -> dict[str, Any]:
    """Each provisioning runs its own clock (the timeout) and creates its pod, Secret and the
    rest anew (instances.provisioning.converge), so a start or a new node gets fresh ones; its
    pod is a new one, whose uid is learnt when it is first read."""
    return {"provisioning_since": now or timezone.now(), "objects_created_at": None, "pod_uid": ""}


# --- decisions (the caller holds the row lock) -----------------------------------------------


def instance_create(
    instance: Instance,
    *,
    placement: tuple[Node, list[int]] | None,
    queued_at: datetime | None = None,
    gang: str = "",
) -> None:
    """A new order enters the machine queued (in line from `queued_at`, now by default: a
    gang's members all at one moment) or, when placement found GPUs for it at once,
    provisioning on that node with the GPUs allocated to its holding; provisioning starts
    after commit. `gang`: the gang it is one of (its owner's id: instances.gangs)."""
    events = [InstanceEvent(instance=instance, status=S.QUEUED, message=later("Ordered."))]
    companions = companions_new(instance)  # its stop policy, pod watch and any monthly rental
    if placement is not None:
        node = placement[0]
        instance.status, instance.node = S.PROVISIONING, node
        instance.region_id = node.region_id
        for key, value in _provisioning_anew().items():
            setattr(instance.pod_watch, key, value)
        placed = InstanceEvent(instance=instance, status=S.PROVISIONING, message=_placed(node))
        events.append(placed)
    holding, held = holding_new(
        holding_id=instance.id,
        kind=HoldingKind.RANK if gang else HoldingKind.INSTANCE,
        tenant_id=instance.tenant_id,
        created_by_id=instance.created_by_id,
        offering=instance.offering,
        billing=instance.billing,
        region_id=instance.region_id,
        gang=gang,
        parent=gang,
        placement=placement,
        queued_at=queued_at,
    )
    # one round trip: every order makes these
    insert_together([holding, instance, *companions, *events, *held])
    instance.holding = holding
    if placement is not None:
        enqueue_on_commit("instances.tasks.provision_instance", instance.id)


def instance_mark_placed(instance: Instance, node: Node, indices: list[int]) -> None:
    """A queued instance got GPUs: they are allocated to it on `node` and it is provisioning;
    provisioning starts after commit."""
    holding_place(instance.id, node, indices)
    _transition(
        instance,
        S.PROVISIONING,
        _placed(node),
        node=node,
        region_id=node.region_id,
        **_provisioning_anew(),
    )
    enqueue_on_commit("instances.tasks.provision_instance", instance.id)


def instance_mark_provisioning(instance: Instance, *, gpus_attached: bool = True) -> None:
    """A stopped monthly rental starts again on the node it keeps reserved: with its GPUs, or
    in no-GPU mode without them (they stay reserved, and the month pays for both)."""
    holding_gpus_attached_set(instance.id, gpus_attached)
    message = (
        later("Starting on its reserved node (paid monthly).")
        if gpus_attached
        else later(
            "Starting on its reserved node without GPUs (no-GPU mode); its GPUs stay "
            "reserved, and the month pays for both."
        )
    )
    _transition(instance, S.PROVISIONING, message, **_provisioning_anew())
    enqueue_on_commit("instances.tasks.provision_instance", instance.id)


def instance_mark_placed_cpu_only(instance: Instance, node: Node) -> None:
    """A stopped instance starts in no-GPU mode on `node` (compute.placement.choose_cpu_only):
    its pod without GPUs, its disks, NAS and SSH as before; provisioning starts after
    commit."""
    holding_place_cpu_only(instance.id, node)
    _transition(
        instance,
        S.PROVISIONING,
        # `gpus` 0: the operator overview's history reads this placement as holding none
        later("Starting without GPUs (no-GPU mode) on %(node)s.") % {"node": node.name, "gpus": 0},
        node=node,
        region_id=node.region_id,
        **_provisioning_anew(),
    )
    enqueue_on_commit("instances.tasks.provision_instance", instance.id)


def instance_mark_queued(instance: Instance, *, at: datetime | None = None) -> None:
    """A start was asked: the instance waits for GPUs behind earlier orders for them (a
    cluster's ranks all at the same moment `at`, as one order)."""
    holding_queue(instance.id, at=at)
    _transition(instance, S.QUEUED, later("Start requested."))


def instance_requeue(instance: Instance, message: str) -> None:
    """Automatic recovery after its node was lost: billing pauses, the GPUs go back, and the
    instance waits for GPUs again with the same disks, first in line (it was running before
    anything now queued was ordered)."""
    gpus_release(instance)
    holding_queue(instance.id, at=instance.created_at)
    _transition(
        instance,
        S.QUEUED,
        message,
        running_since=None,
        provisioning_since=None,
        node=None,
        ssh_port=None,
        jupyter_port=None,
    )
    if Workload.objects.filter(pk=instance.pk).exists():
        workload_lost.send(sender=Instance, instance_id=instance.id)


def instance_mark_stopping(instance: Instance, message: str, *, restart: bool = False) -> None:
    """Stop asked (by the user, an operator, an empty balance, the end of a monthly rental, or a
    change of disks when `restart`): billing ends now, the minute in progress counted as
    started, and the pod is deleted after commit; the disk is kept. With `restart` the instance
    starts again once stopped."""
    if instance.status == S.RUNNING:
        bill_until(instance, timezone.now(), started_minute=True)
    restarting = {"restart_pending": True} if restart else {}
    _transition(instance, S.STOPPING, message, running_since=None, **restarting)
    enqueue_on_commit("instances.tasks.stop_instance", instance.id)


def instance_mark_terminating(instance: Instance, *, keep_disk: bool) -> None:
    """Terminate asked: billing ends now, the minute in progress counted as started, and
    everything the instance has on the cluster is deleted after commit (its own disk too,
    unless `keep_disk`)."""
    if instance.status == S.RUNNING:
        bill_until(instance, timezone.now(), started_minute=True)
    if instance.status == S.QUEUED:
        holding_release(instance.id)  # it waits no more (a placed one frees its GPUs at the end)
    _transition(
        instance,
        S.TERMINATING,
        later("Terminate requested."),
        running_since=None,
        keep_disk=keep_disk,
    )
    enqueue_on_commit("instances.tasks.terminate_instance", instance.id)


# --- reports (the row is locked here; a stale report changes nothing) -------------------------


def instance_mark_running(instance_id: str) -> str:
    """The pod is ready: billing starts, in a new session. One of a gang (a cluster's rank)
    goes to checking instead, unbilled: its owner checks the gang once every member is checking
    (instances.signals.gang_checking, which the clusters app hears: its pre-flight check) and
    ranks_mark_running starts the billing of all of them together when it passes. Returns the
    instance's status."""
    with transaction.atomic():
        instance = instance_locked(instance_id)
        if instance.status != S.PROVISIONING:
            return instance.status
        if gang := gang_of(instance):
            _transition(
                instance,
                S.CHECKING,
                later("Up; waiting for the cluster's pre-flight check. Not billed yet."),
                provisioning_since=None,
            )
            gang_checking.send(sender=Instance, gang=gang)
            return S.CHECKING
        now = timezone.now()
        _transition(
            instance,
            S.RUNNING,
            later("Running: billing started."),
            running_since=now,
            started_at=instance.started_at or now,
            session=instance.session + 1,
            provisioning_since=None,
        )
        meter_start(instance, now)
        emit_about(instance, EventType.INSTANCE_RUNNING)
    return S.RUNNING


def ranks_mark_running(ranks: list[Instance], message: str) -> None:
    """A cluster's pre-flight passed (its ranks locked, every one checking): billing starts for
    every rank at the same moment, each in a new session. The transitions of all the ranks
    are written together (_transitions: one UPDATE of the instances, one of their pod watches,
    the events inserted at once; the sessions opened by one query), whatever the cluster's
    size."""
    now = timezone.now()
    _transitions(
        ranks,
        S.RUNNING,
        message,
        running_since=now,
        started_at=lambda instance: instance.started_at or now,
        session=lambda instance: instance.session + 1,
        provisioning_since=None,
    )
    meters_start(ranks, now)


def rank_mark_checking(instance: Instance, message: str, *, now: datetime) -> None:
    """A running rank (locked) whose cluster lost a node: the closed minutes are charged and
    billing pauses until the cluster's pre-flight passes again."""
    bill_until(instance, now, started_minute=False)
    _transition(instance, S.CHECKING, message, running_since=None)


def rank_mark_restarting(instance: Instance, message: str, *, now: datetime) -> None:
    """A rank (locked) that runs a program to its end, on a healthy node, whose gang lost a
    member: the closed minutes of a running one are charged, billing pauses, and it provisions
    again on its own node, keeping its GPUs and disks: a new pod (the old one runs an earlier
    attempt: instances.provisioning.converge) starts the program again with
    STARVERSE_RESTART_COUNT one higher, once its gang's check passes."""
    if instance.status == S.RUNNING:
        bill_until(instance, now, started_minute=False)
    _transition(instance, S.PROVISIONING, message, running_since=None, **_provisioning_anew(now))
    enqueue_on_commit("instances.tasks.provision_instance", instance.id)


def instance_fail(instance_id: str, message: str) -> str:
    """The instance could not be provisioned, lost its node, or (queued, monthly) could not pay
    its month: it fails with `message` as its error, is billed no further, and gives its GPUs
    back. Returns the instance's status."""
    with transaction.atomic():
        instance = instance_locked(instance_id)
        if S.FAILED not in INSTANCE_TRANSITIONS[instance.status]:
            return instance.status
        if instance.status in HOLDS_GPUS:
            gpus_release(instance)
        else:
            holding_release(instance.id)  # queued: it waits no more
        _transition(
            instance,
            S.FAILED,
            message,
            error_message=message,
            running_since=None,
            provisioning_since=None,
        )
    return S.FAILED


def instance_recreate(instance_id: str, *, now: datetime) -> bool:
    """A running instance's pod vanished (deleted by hand, evicted, its node rebooted): the
    closed minutes are charged, billing pauses, and it provisions again on its node. A
    cluster's rank may be checking (not billed); once up again it waits for a new pre-flight
    round, which pauses the billing of its cluster's other ranks first. False if the instance
    was neither running nor checking."""
    with transaction.atomic():
        instance = instance_locked(instance_id)
        if instance.status not in (S.RUNNING, S.CHECKING):
            return False
        bill_until(instance, now, started_minute=False)
        _transition(
            instance,
            S.PROVISIONING,
            later("Its container was gone; recreating it. Billing paused."),
            running_since=None,
            **_provisioning_anew(now),
        )
        enqueue_on_commit("instances.tasks.provision_instance", instance.id)
    return True


def instance_workload_ended(
    instance_id: str, *, exit_code: int, finished_at: datetime | None, message: str
) -> bool:
    """The program a running instance runs to its end (instances.models.Workload) ended with
    `exit_code` at `finished_at` (as the kubelet reports it): billing ends then, the minute in
    progress counted as started, and the instance stops (its pod deleted after commit, its
    GPUs released once stopped, its disks kept); its owner hears of it (workload_ended) and
    decides what comes next. False if it was not running (or checking) one."""
    with transaction.atomic():
        instance = instance_locked(instance_id)
        workload = Workload.objects.filter(instance_id=instance_id).first()
        if workload is None or instance.status not in (S.RUNNING, S.CHECKING):
            return False
        now = timezone.now()
        if finished_at is not None and finished_at.microsecond == 0:
            # the kubelet's times are whole seconds: it ended within that second
            finished_at += timedelta(seconds=1)
        ended = min(finished_at or now, now)
        if instance.running_since is not None:
            bill_until(instance, max(ended, instance.running_since), started_minute=True)
        workload.exit_code, workload.finished_at = exit_code, ended
        workload.message = message[-WORKLOAD_MESSAGE_CHARS:]
        workload.save(update_fields=["exit_code", "finished_at", "message"])
        said = (
            later("Its program finished (exit code 0). Billing stopped.")
            if exit_code == 0
            else later("Its program failed with exit code %(code)s. Billing stopped.")
            % {"code": exit_code}
        )
        _transition(instance, S.STOPPING, said, running_since=None)
        enqueue_on_commit("instances.tasks.stop_instance", instance.id)
        workload_ended.send(sender=Instance, instance_id=instance.id, exit_code=exit_code)
    logger.info("instance.workload_ended instance=%s exit_code=%s", instance_id, exit_code)
    return True


def instance_mark_stopped(instance_id: str) -> str:
    """The pod is gone: the instance is stopped with its disk kept. A monthly rental whose
    period runs keeps its node reserved; any other instance gives its GPUs back. One stopped to
    change its disks starts again after commit. Returns the instance's status."""
    with transaction.atomic():
        instance = instance_locked(instance_id)
        if instance.status != S.STOPPING:
            return instance.status
        if period_active(instance):
            message = later("Stopped. The disk is kept and the node stays reserved.")
        else:
            gpus_release(instance)
            message = later("Stopped. The disk is kept.")
        restart = instance.restart_pending
        _transition(instance, S.STOPPED, message, restart_pending=False)
        emit_about(instance, EventType.INSTANCE_STOPPED)
        if restart:
            enqueue_on_commit("instances.tasks.restart_instance", instance.id)
    return S.STOPPED


def instance_mark_terminated(instance_id: str, *, disk_claim: str) -> str:
    """Everything the instance had on the cluster is gone (but `disk_claim`, its own disk, when
    it was to be kept): its cloud disks are free again with their data, its own disk becomes a
    cloud disk when kept, its GPUs go back, and it is terminated. Returns its status."""
    with transaction.atomic():
        instance = instance_locked(instance_id)
        if instance.status != S.TERMINATING:
            return instance.status
        released = disks_release(instance.id)
        if instance.keep_disk and instance.k8s_name:
            kept = _own_disk_keep(instance, disk_claim)
            message = later("Terminated; its disk was kept as the cloud disk %(disk)s.") % {
                "disk": kept.name
            }
        else:
            message = later("Terminated; its disk was deleted.")
        gpus_release(instance)
        _transition(instance, S.TERMINATED, message, terminated_at=timezone.now())
        if released:
            InstanceEvent.objects.create(
                instance=instance,
                status=S.TERMINATED,
                message=later("Cloud disks detached and kept with their data: %(names)s.")
                % {"names": ", ".join(released)},
            )
    return S.TERMINATED


def _own_disk_keep(instance: Instance, claim_name: str) -> Disk:
    """A terminated instance's own disk, adopted as a cloud disk (the same claim)."""
    return disk_adopt(
        tenant_id=instance.tenant_id,
        created_by_id=instance.created_by_id,
        name=f"{instance.name}-disk",
        size_gb=instance.offering.local_disk_gb,
        namespace=instance.k8s_namespace,
        claim_name=claim_name,
        origin=instance.id,
        region=instance.region_id or DEFAULT_REGION,
    )
