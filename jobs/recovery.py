"""Jobs: recovering, the one path every interruption of a job's ranks takes (job_recover), its
rules per cause in one table (RULES): a lost node or pod (instances.gangs.workload_owner_lost
calls job_rank_lost), a spot job's preemption and a program's failure (jobs.services.job_sync
finds them), and the ranks of a job whose program failed started again once stopped
(rank_restart)."""

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from clusters.models import Cluster
from clusters.ranks import rank_lost
from clusters.services import cluster_start
from fleet.models import Node
from fleet.services import node_review_request
from instances.choices import InstanceStatus
from instances.gangs import NODE_LOST, POD_LOST
from instances.lifecycle import instance_recover, instance_start, instance_stop
from instances.models import Instance, Workload
from instances.preemption import PREEMPTED
from jobs.choices import ENDED, JobStatus
from jobs.models import Job, JobRank
from jobs.states import (
    job_end_with_ranks,
    job_locked,
    job_move,
    job_note,
    past_time_limit,
    rank_instances,
)
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import ServiceError
from starverse.core.text import later

logger = logging.getLogger(__name__)
S = InstanceStatus
J = JobStatus

RANK_FAILED = gettext_noop("A rank's program failed: every rank stops, then all start again.")
REVIEW_AFTER_ERRORS = 2  # a job's program failing this often on one node: the node is reviewed


class Cause(StrEnum):
    """What interrupted a job's ranks (its timeline names it)."""

    NODE_LOST = NODE_LOST  # its node went down (fleet's health rules, the node lease watch)
    EVICTED = POD_LOST  # its pod vanished while its node stayed up (evicted, deleted)
    PREEMPTED = PREEMPTED  # a spot job's GPUs taken back for a paying order
    PROGRAM_FAILED = "program_failed"  # its program exited non-zero: the user's error


@dataclass(frozen=True)
class Rule:
    """What a cause means to the job: `user_error`, counted in error_restarts against
    max_restarts (else the platform's failure, never limited); `node_at_fault`, counted against
    the node it happened on (REVIEW_AFTER_ERRORS: the node is put up for review); `restart`,
    every rank stops and starts again through admission and the queue (else the lost rank is
    placed again now and the healthy ones keep their nodes); `said`, the timeline's line."""

    user_error: bool
    node_at_fault: bool
    restart: bool
    said: str


RULES = {
    # the node is down already: the platform's own signal, no review to ask for
    Cause.NODE_LOST: Rule(
        user_error=False,
        node_at_fault=False,
        restart=False,
        said=gettext_noop(
            "Rank %(rank)s lost its node %(node)s (%(reason)s): billing paused for the whole "
            "job; placing the rank again with its disks."
        ),
    ),
    Cause.EVICTED: Rule(
        user_error=False,
        node_at_fault=True,
        restart=False,
        said=gettext_noop(
            "Rank %(rank)s lost its pod on %(node)s (%(reason)s): billing paused for the whole "
            "job; placing the rank again with its disks."
        ),
    ),
    # the node did nothing wrong: spot GPUs went to a paying order
    Cause.PREEMPTED: Rule(
        user_error=False,
        node_at_fault=False,
        restart=True,
        said=gettext_noop(
            "Its GPUs were taken back for a paying order (a spot job); it resumes from its "
            "checkpoint when GPUs free up."
        ),
    ),
    Cause.PROGRAM_FAILED: Rule(
        user_error=True,
        node_at_fault=True,
        restart=True,
        said=gettext_noop(
            "Its program failed with exit code %(code)s; running it again "
            "(%(n)s of %(most)s restarts after an error)."
        ),
    ),
}


@dataclass(frozen=True)
class Lost:
    """One interruption: its cause, the rank it hit (`instance`), the node it hit it on, why
    (`reason`, as the platform says it), and for a program's failure its Workload."""

    cause: Cause
    instance: Instance
    node: Node | None
    reason: str = ""
    workload: Workload | None = None


def job_rank_lost(instance_id: str, *, cause: str, node: Node, reason: str) -> bool:
    """A job's rank lost its node or its pod (instances.gangs.workload_owner_lost: the node
    went down, the pod was evicted or vanished): it recovers by the one path (job_recover), under
    the job's lock. False if its job has ended or is cancelled, or the rank had moved on."""
    job_id = JobRank.objects.filter(pk=instance_id).values_list("job_id", flat=True).first()
    if job_id is None:
        return False
    with transaction.atomic():
        job = job_locked(job_id)
        if job.status in ENDED or job.status == J.CANCELLING:
            return False
        instances = rank_instances(job)
        rank = next(i for i in instances if i.pk == instance_id)
        lost = Lost(Cause(cause), rank, node, reason)
        return job_recover(job, instances, lost, now=timezone.now())


def job_recover(job: Job, instances: list[Instance], lost: Lost, *, now: Any) -> bool:
    """The one path every interruption of a job's ranks takes (RULES): billing pauses for the
    whole job, the lost ranks are placed again with the same disks (the healthy ones kept on
    their nodes), the program starts again with STARVERSE_RESTART_COUNT one higher (each new
    pod's: instances.provisioning) and the same checkpoint directory; the program's own errors
    and the platform's failures are counted apart; a node the job keeps failing on is put up
    for review; the timeline names the cause. A program's error with no restart left ends the
    job instead. Returns False if the rank had moved on meanwhile (nothing done)."""
    rule = RULES[lost.cause]
    if not rule.restart and not _place_again(job, lost):
        return False
    if rule.node_at_fault:
        _node_count(job, lost)
    words = _words(job, instances, lost)
    if rule.user_error:
        job.exit_code = words["code"]
        if job.error_restarts >= job.max_restarts or past_time_limit(job, now):
            _program_failed(job, instances, lost, now=now)
            return True
        job.error_restarts += 1
        words["n"] = job.error_restarts
    if rule.restart:
        _restart_all(job, instances)
    job.save(update_fields=["exit_code", "error_restarts", "restart_pending", "error_nodes"])
    said = later(rule.said) % words
    # before its first start, a rank placed again leaves the job waiting to start
    if job.started_at is None and not rule.restart:
        job_note(job, job.status, said)
    elif job.status != J.RECOVERING:
        job_move(job, J.RECOVERING, said)
    else:
        job_note(job, job.status, said)
    logger.info("job.recovering job=%s cause=%s rank=%s", job.id, lost.cause, lost.instance.pk)
    return True


def _place_again(job: Job, lost: Lost) -> bool:
    """The rank that lost its node or pod is placed again now with its disks: a multi-node
    job's on another whole node while its healthy ranks keep theirs and every rank's program
    starts again, billing paused for all (clusters.ranks.rank_lost); a one-node job's on GPUs
    free anywhere, ahead of new orders (instances.lifecycle.instance_recover)."""
    if job.cluster_id is not None and lost.node is not None:
        return rank_lost(
            lost.instance.pk, cluster_id=job.cluster_id, node=lost.node, reason=lost.reason
        )
    return instance_recover(lost.instance.pk, reason=lost.reason)


def _restart_all(job: Job, instances: list[Instance]) -> None:
    """Every rank stops (billing ends; a preempted gang is stopping already), then all start
    again as one order once stopped (rank_restart), in line for GPUs like any start."""
    job.restart_pending = True
    # a program's exit while it was stopped (a SIGTERM's) is not its own verdict
    Workload.objects.filter(pk__in=[i.pk for i in instances]).update(
        exit_code=None, finished_at=None
    )
    for instance in instances:
        if instance.status in (S.RUNNING, S.CHECKING, S.PROVISIONING):
            instance_stop(instance_id=instance.pk, reason=RANK_FAILED, by_owner=True)
    enqueue_on_commit("jobs.tasks.restart_rank", instances[0].pk)


def _words(job: Job, instances: list[Instance], lost: Lost) -> dict[str, Any]:
    index = next(n for n, i in enumerate(instances) if i.pk == lost.instance.pk)
    code = lost.workload.exit_code if lost.workload is not None else None
    return {
        "cause": str(lost.cause),
        "rank": index,
        "node": lost.node.name if lost.node else "-",
        "reason": lost.reason,
        "code": code,
        "n": job.error_restarts,
        "most": job.max_restarts,
    }


def _program_failed(job: Job, instances: list[Instance], lost: Lost, *, now: Any) -> None:
    """A rank's program failed with no restart left (or past the time limit): the job fails
    with the exit code and the program's last lines."""
    code = job.exit_code
    job.message = lost.workload.message if lost.workload is not None else ""
    failed = (
        later(gettext_noop("Failed with exit code %(code)s.")) % {"code": code}
        if len(instances) == 1
        else later(gettext_noop("Rank %(rank)s failed with exit code %(code)s."))
        % {"code": code, "rank": _index_of(job, lost.instance.pk)}
    )
    job_end_with_ranks(job, instances, J.FAILED, failed, now=now)


def _node_count(job: Job, lost: Lost) -> None:
    """Count the interruption against the node it happened on; on the REVIEW_AFTER_ERRORS-th
    there, the node is put up for an operator's review (fleet.services.node_review_request: it
    stays in service; the operator decides), as a job that keeps failing on one node (its
    program, or its pod evicted) may be the node's fault, not the program's."""
    if lost.node is None:
        return
    key = str(lost.node.pk)
    job.error_nodes = {**job.error_nodes, key: job.error_nodes.get(key, 0) + 1}
    if job.error_nodes[key] == REVIEW_AFTER_ERRORS:
        last = (
            f"exit code {lost.workload.exit_code}"
            if lost.workload is not None
            else f"{lost.cause}: {lost.reason}"
        )
        node_review_request(
            node=lost.node,
            reason=f"job {job.id}: interrupted {REVIEW_AFTER_ERRORS} times on this node "
            f"(last: {last})",
        )


def _index_of(job: Job, instance_id: str) -> int:
    return job.ranks.values_list("index", flat=True).get(instance_id=instance_id)


def rank_restart(instance_id: str) -> None:
    """Start the ranks of a job whose program failed again, once every one has stopped (the
    start goes through admission and the queue like any start: a multi-node job's ranks as one
    order, clusters.services.cluster_start), under the job's lock: sent twice (the sweep sends
    it again in case its task was lost), it starts once. A start refused (an empty balance, a
    limit) ends the job with the refusal's reason."""
    rank = JobRank.objects.get(pk=instance_id)
    with transaction.atomic():
        job = job_locked(rank.job_id)
        if not job.restart_pending or job.status != J.RECOVERING:
            return
        statuses = list(job.ranks.values_list("instance__status", flat=True))
        if S.STOPPING in statuses:
            raise StillStopping(instance_id)
        if any(status not in (S.STOPPED, S.FAILED) for status in statuses):
            return
        job.restart_pending = False
        job.save(update_fields=["restart_pending"])
        try:
            with transaction.atomic():
                if job.cluster_id is not None:
                    cluster_start(cluster=Cluster.objects.get(pk=job.cluster_id))
                else:
                    instance_start(instance_id=instance_id, by_owner=True)
        except ServiceError as error:
            job_end_with_ranks(
                job,
                rank_instances(job),
                J.FAILED,
                later(gettext_noop("It could not start again: %(reason)s"))
                % {"reason": error.message},
                now=timezone.now(),
            )


class StillStopping(Exception):
    """A rank's instance is still stopping: start them once stopped (the task retries)."""
