"""The output of programs run to their end (instances.models.Workload: a job's), shipped from the
cluster into the database by the worker: every few seconds while the pod runs
(instances.tasks.check_workloads) and once more as the pod is deleted (converge, before the
delete). The web tier has no cluster credentials (KUBE_ACCESS=false), so it reads a job's log
from here, live or long after the pod went.

Each pass asks the kubelet for the lines since the last one shipped (`sinceSeconds` from it,
with a margin for clocks that differ, and `timestamps`), drops the lines up to the last one's
time and appends the rest, keeping the last WORKLOAD_LOG_BYTES; a pass writes only if no other
moved the row since it read it, so two at once (the periodic one and the pod's deletion) never
append a line twice."""

import logging
import math
import re
from datetime import UTC, datetime

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from instances.choices import InstanceStatus
from instances.models import Instance, WorkloadLog
from starverse.core import kube

logger = logging.getLogger(__name__)
S = InstanceStatus
# Seconds asked for beyond the last line's age: the worker's clock and the node's may differ
# (the overlap is dropped by the lines' own times).
SINCE_MARGIN_S = 30
_STAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z (.*)$", re.DOTALL)
# A pod whose output is shipped: its program runs, or its instance stops (the last lines).
SHIPPED = (S.RUNNING, S.CHECKING, S.STOPPING)


def _key(stamp: str) -> tuple[str, int]:
    """A kubelet time (Go's RFC3339Nano: no trailing zeros) as a sortable key."""
    found = _STAMPED.match(f"{stamp} ")
    if found is None:
        return ("", 0)
    return found[1], int((found[2] or "").ljust(9, "0"))


def _after(text: str, read_to: str) -> tuple[str, str]:
    """The lines of `text` (each with the kubelet's time first) after `read_to`, without
    their times, and the time of the last one ("" when none is new)."""
    last = _key(read_to) if read_to else ("", -1)
    kept: list[str] = []
    newest = ""
    for line in text.splitlines(keepends=True):
        found = _STAMPED.match(line)
        if found is None:  # a line the kubelet did not stamp (never, from a real one)
            continue
        stamp = line.split(" ", 1)[0]
        if _key(stamp) <= last:
            continue
        kept.append(found[3])
        newest = stamp
    return "".join(kept), newest


def _age_s(stamp: str, now: datetime) -> int:
    seconds, _nanos = _key(stamp)
    then = datetime.strptime(seconds, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return max(0, math.ceil((now - then).total_seconds()))


def log_ship(
    instance_id: str, namespace: str, name: str, *, attempt: int, final: bool = False
) -> int:
    """Ship what the pod printed since the last pass into its attempt's row (`final`: the pod
    is about to be deleted, nothing more comes). Returns the bytes appended. Two passes at once
    read the same lines; the row is written only if no other pass moved it since it was read
    (a conditional update on `read_to`), so no line is appended twice."""
    for _try in range(3):  # another pass moved the row meanwhile: read it again
        shipped = _ship_once(instance_id, namespace, name, attempt=attempt, final=final)
        if shipped is not None:
            return shipped
    return 0


def _ship_once(
    instance_id: str, namespace: str, name: str, *, attempt: int, final: bool
) -> int | None:
    """One read and conditional write; None if another pass moved the row first."""
    row, _created = WorkloadLog.objects.get_or_create(instance_id=instance_id, attempt=attempt)
    if row.complete:
        return 0
    since = _age_s(row.read_to, timezone.now()) + SINCE_MARGIN_S if row.read_to else None
    try:
        text = kube.pod_log(
            namespace,
            name,
            timestamps=True,
            since_seconds=since,
            tail_lines=settings.WORKLOAD_LOG_LINES,
        )
    except kube.KubeError as error:  # the next pass tries again
        logger.info("logs.ship_failed instance=%s error=%s", instance_id, error)
        text = ""
    new, newest = _after(text, row.read_to)
    changes: dict[str, object] = {"complete": True} if final else {}
    if new:
        whole = (row.text + new).encode()
        limit = settings.WORKLOAD_LOG_BYTES
        truncated = row.truncated or len(whole) > limit
        changes.update(
            text=whole[-limit:].decode(errors="ignore"), read_to=newest, truncated=truncated
        )
    if not changes:
        return 0
    moved = WorkloadLog.objects.filter(pk=row.pk, read_to=row.read_to, complete=False).update(
        **changes
    )
    return len(new.encode()) if moved else None


def logs_ship(*, region: str | None = None) -> int:
    """One pass over the pods that run a program: each one's new lines shipped (one log read
    a pod; none while no program runs). Returns how many pods were read."""
    in_region = Q(region_id=region) if region else Q()
    rows = (
        Instance.objects.filter(in_region, status__in=SHIPPED, workload__pods_made__gt=0)
        .exclude(k8s_name="")
        .values_list("id", "k8s_namespace", "k8s_name", "workload__pods_made")
    )
    read = 0
    for instance_id, namespace, name, pods_made in rows:
        log_ship(instance_id, namespace, name, attempt=pods_made - 1)
        read += 1
    return read
