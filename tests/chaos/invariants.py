"""What must hold after every round of faults, once the reconcile loops have had their time.
Each check gives the violations it found (an empty list: it holds)."""

import io
import math
from collections import defaultdict
from collections.abc import Callable

from django.core.management import CommandError, call_command

from billing.choices import TransactionKind
from billing.models import LedgerTransaction, TopUp
from compute.choices import HoldingState
from compute.models import Allocation
from endpoints.models import EndpointReplica
from instances.choices import HOLDS_GPUS, InstanceStatus
from instances.models import Instance, InstanceEvent
from tests.chaos.traffic import PodSampler, Promises, instance_label
from tests.chaos.workloads import Submitter

S = InstanceStatus
TRANSITIONAL = (S.QUEUED, S.PROVISIONING, S.CHECKING, S.STOPPING, S.TERMINATING)
# A session's billed minutes against its pod's sampled running time: the pod is seen each
# second, billing starts when the platform sees it run and counts the minute a stop is asked in.
MINUTE_SLACK = 1


def transitional() -> list[str]:
    """No instance left queued (the fleet has room for every order), provisioning, checking,
    stopping or terminating."""
    rows = Instance.objects.filter(status__in=TRANSITIONAL).values_list("id", "status")
    return [f"{pk} stuck {status}" for pk, status in rows]


def gpus(sampler: PodSampler) -> list[str]:
    """Each GPU held once (a node's live pods never ask for more than it has), none leaked (an
    allocation only for an instance in a GPU-holding status, as many as its offering has; no
    pod left for an instance that holds none)."""
    found = [f"overbooked {line}" for line in sampler.overbooked]
    held: dict[str, int] = defaultdict(int)
    for holding, state in Allocation.objects.values_list("holding_id", "holding__state"):
        held[holding] += 1
        if state != HoldingState.PLACED:
            found.append(f"allocation of {holding}, which is {state}")
    holding_gpus = set(HOLDS_GPUS)
    for pk, status, count in Instance.objects.values_list(
        "id", "status", "offering__gpu_count"
    ):  # fmt: skip
        if status in holding_gpus and held.get(pk, 0) != count:
            found.append(f"{pk} {status} holds {held.get(pk, 0)} GPUs of {count}")
        if status not in holding_gpus and held.get(pk):
            found.append(f"{pk} {status} still holds {held[pk]} GPUs (leaked)")
    live = {instance_label(pk) for pk in Instance.objects.filter(status__in=HOLDS_GPUS).values_list("pk", flat=True)}  # fmt: skip
    for pod in sampler.pods_now():
        label = (pod["metadata"].get("labels") or {}).get("starverse.io/instance")
        if label and label not in live and not pod["metadata"].get("deletionTimestamp"):
            found.append(f"pod {pod['metadata']['name']} left for {label}, which holds no GPUs")
    return found


def minutes(sampler: PodSampler, promises: Promises) -> list[str]:
    """No minute billed twice or missed: each terminated instance's usage postings cover
    minutes 1..n of each session once, none overlapping, and n is its pods' sampled running
    time (up to when its termination was answered; a cluster's or a job's rank: less the time
    it was checking, its pre-flight's, which is not billed) in started minutes, within
    MINUTE_SLACK."""
    found = []
    done = Instance.objects.filter(status=S.TERMINATED, billing="hourly")
    for instance in done.select_related("holding"):
        ranges, billed = _sessions(f"usage:{instance.id}:")
        billed += instance.holding.pending_minutes
        found += _overlaps(instance.id, ranges)
        ran = sampler.running_seconds(
            instance_label(instance.id),
            promises.terminated.get(instance.id),
            unbilled=_checking(instance.id),
        )
        expected_minutes = math.ceil(ran / 60) if ran else 0
        if abs(billed - expected_minutes) > MINUTE_SLACK:
            found.append(f"{instance.id}: {billed} minutes billed, its pods ran {ran:.0f} s")
    return found


def _checking(instance_id: str) -> list[tuple[float, float]]:
    """The stretches (epoch seconds) an instance was checking, from its recorded steps: a
    rank up and waiting for its cluster's pre-flight, not billed (instances.states)."""
    stretches: list[tuple[float, float]] = []
    since: float | None = None
    steps = InstanceEvent.objects.filter(instance_id=instance_id).order_by("at", "id")
    for at, status in steps.values_list("at", "status"):
        if status == S.CHECKING and since is None:
            since = at.timestamp()
        elif status != S.CHECKING and since is not None:
            stretches.append((since, at.timestamp()))
            since = None
    if since is not None:
        stretches.append((since, math.inf))
    return stretches


def _sessions(prefix: str) -> tuple[dict[str, list[tuple[int, int]]], int]:
    """The minute ranges billed under each session of a meter key, and their minutes."""
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    billed = 0
    for key, count in LedgerTransaction.objects.filter(idempotency_key__startswith=prefix).values_list(
        "idempotency_key", "minutes"
    ):  # fmt: skip
        session, span = key[len(prefix) :].split(":")
        first, last = (int(part) for part in span.split("-"))
        ranges[session].append((first, last))
        billed += count or 0
    return ranges, billed


def _overlaps(owner: str, ranges: dict[str, list[tuple[int, int]]]) -> list[str]:
    found = []
    for session, spans in ranges.items():
        expected = 1
        for first, last in sorted(spans):
            if first != expected:
                found.append(
                    f"{owner} session {session}: minute {expected} "
                    f"{'billed twice' if first < expected else 'missed'}"
                )
            expected = last + 1
    return found


def replica_minutes(sampler: PodSampler, deleted_at: dict[str, float]) -> list[str]:
    """An endpoint's replicas, like instances: each gone replica's minutes billed once each,
    as many as its pod was seen Ready in started minutes (within a minute a Ready stretch), up
    to when its endpoint's delete was answered (`deleted_at`: endpoint id → epoch s)."""
    found = []
    for replica in EndpointReplica.objects.filter(gone_at__isnull=False).select_related("holding"):
        ranges, billed = _sessions(f"endpoint:{replica.id}:")
        billed += replica.holding.pending_minutes
        found += _overlaps(replica.id, ranges)
        ready = sampler.ready_seconds(replica.pod_name, deleted_at.get(replica.endpoint_id))
        expected = math.ceil(ready / 60) if ready else 0
        if abs(billed - expected) > MINUTE_SLACK * max(1, len(ranges)):
            found.append(f"{replica.id}: {billed} minutes billed, its pod was Ready {ready:.0f} s")
    return found


def checkpoints(sampler: PodSampler) -> list[str]:
    """A job's simulated trainer never went back to an earlier checkpoint step on any rank's
    disk (a restarted rank resumes from the step it had written)."""
    return [f"checkpoint rewound: {line}" for line in sampler.rewound]


def topups(promises: Promises) -> list[str]:
    """Every top-up whose checkout was paid is credited, exactly once, by its amount."""
    found = []
    for pk, amount in promises.topups.items():
        topup = TopUp.objects.get(pk=pk)
        credits = LedgerTransaction.objects.filter(topup=topup, kind=TransactionKind.TOPUP)
        if topup.status != "paid" or credits.count() != 1:
            found.append(f"{pk} {topup.status}, credited {credits.count()} times")
        elif credits.get().amount_fen != amount:
            found.append(f"{pk} credited {credits.get().amount_fen} fen of {amount}")
    return found


def promised(promises: Promises) -> list[str]:
    """Every 2xx did what it said: an order answered 202 is one instance (one per
    Idempotency-Key, however often it was asked), a termination answered 202 ended it."""
    found = []
    for key, pk in promises.orders.items():
        made = list(Instance.objects.filter(idempotency_key=key).values_list("pk", flat=True))
        if made != [pk]:
            found.append(f"order {key[:8]} answered {pk}, made {made}")
    ended = Instance.objects.filter(pk__in=list(promises.terminated))
    for pk, status in ended.values_list("pk", "status"):
        if status != S.TERMINATED:
            found.append(f"{pk} terminated (202) but {status}")
    return found


def audits() -> list[str]:
    """`billing_audit` and `meter_audit` find nothing."""
    found = []
    for command in ("billing_audit", "meter_audit"):
        err = io.StringIO()
        try:
            call_command(command, stdout=io.StringIO(), stderr=err)
        except CommandError as error:
            found.append(f"{command}: {error} {err.getvalue().strip()}")
    return found


def checks(
    sampler: PodSampler, promises: Promises, kinds: Submitter
) -> dict[str, Callable[[], list[str]]]:
    """Every check of a round, by the name the report prints."""
    return {
        "no holding stuck in a transitional status": lambda: transitional() + kinds.transitional(),
        "no GPU held twice or leaked": lambda: gpus(sampler),
        "no minute billed twice or missed": lambda: minutes(sampler, promises),
        "no replica minute billed twice or missed": lambda: replica_minutes(
            sampler, kinds.made.endpoint_deleted_at
        ),
        "cluster running, job succeeded, endpoint serving": lambda: kinds.broken(sampler.kube_url),
        "no checkpoint step went back": lambda: checkpoints(sampler),
        "every paid top-up credited exactly once": lambda: topups(promises),
        "every 2xx did what it said": lambda: promised(promises),
        "billing_audit and meter_audit clean": audits,
    }
