"""What the console and the API read of a job: its view (ranks, cost), its events, its logs."""

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db.models import Sum
from django.db.models.functions import Length, Substr

from instances.choices import InstanceStatus
from instances.models import Instance, Workload, WorkloadLog
from jobs.models import Job, JobEvent, JobRank

S = InstanceStatus
# A rank's pod may print more while its instance is in one of these (a follow goes on).
LIVE = (S.PROVISIONING, S.CHECKING, S.RUNNING, S.STOPPING)
# How often a follow reads what the worker shipped (instances.tasks.check_workloads ships it
# every few seconds).
FOLLOW_POLL_S = 1.0


def jobs_cost_fen(jobs: list[Job]) -> dict[str, int]:
    """What each job's ranks have cost (their instances' charged minutes), in one query."""
    spent = (
        JobRank.objects.filter(job__in=jobs)
        .values("job")
        .annotate(total=Sum("instance__cost_fen"))
        .values_list("job", "total")
    )
    return {job_id: int(total or 0) for job_id, total in spent}


def job_cost_fen(job: Job) -> int:
    return jobs_cost_fen([job]).get(job.pk, 0)


@dataclass(frozen=True)
class RankView:
    rank: int
    instance: str
    node: str | None
    status: str


def _rank_view(row: JobRank) -> RankView:
    return RankView(
        rank=row.index,
        instance=row.instance_id,
        node=row.instance.node.name if row.instance.node else None,
        status=row.instance.status,
    )


def job_ranks(job: Job) -> list[RankView]:
    rows = JobRank.objects.filter(job=job).select_related("instance__node").order_by("index")
    return [_rank_view(row) for row in rows]


def job_views(jobs: list[Job]) -> list[dict[str, Any]]:
    """Several jobs' views in three queries whatever their number (a page of the list)."""
    rows = (
        JobRank.objects.filter(job__in=jobs)
        .select_related("instance__node")
        .order_by("job_id", "index")
    )
    ranks: dict[str, list[RankView]] = {}
    costs: dict[str, int] = {}
    for row in rows:
        ranks.setdefault(row.job_id, []).append(_rank_view(row))
        costs[row.job_id] = costs.get(row.job_id, 0) + row.instance.cost_fen
    return [
        job_view(job, ranks=ranks.get(job.pk, []), cost_fen=costs.get(job.pk, 0)) for job in jobs
    ]


def job_view(
    job: Job, *, ranks: list[RankView] | None = None, cost_fen: int | None = None
) -> dict[str, Any]:
    """The job as the API and the console show it."""
    if ranks is None:
        ranks = job_ranks(job)
    if cost_fen is None:
        cost_fen = job_cost_fen(job)
    return {
        "id": job.id,
        "name": job.name,
        "status": job.status,
        "offering": job.offering_id,
        "image": job.image_id,
        "node_count": job.node_count,
        "command": job.command,
        "script": job.script,
        "env": job.env,
        "checkpoint_dir": job.checkpoint_dir,
        "max_restarts": job.max_restarts,
        "time_limit_minutes": job.time_limit_minutes,
        "template": job.template,
        "disks": job.disks,
        "nas": job.nas,
        "restarts": job.restarts,
        "error_restarts": job.error_restarts,
        "exit_code": job.exit_code,
        "message": job.message,
        "cost_fen": cost_fen,
        "ranks": [vars(rank) for rank in ranks],
        "notes": job.notes,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }


def job_events(job: Job) -> list[JobEvent]:
    return list(JobEvent.objects.filter(job=job).order_by("at", "id"))


@dataclass(frozen=True)
class LogSource:
    """A rank's output of one attempt, as the worker shipped it (instances.provisioning.logs):
    `live` while its pod may print more."""

    instance: Instance
    attempt: int
    live: bool
    kept: WorkloadLog | None


def log_source(job: Job, *, rank: int, attempt: int | None) -> LogSource | None:
    """The output of rank `rank`'s attempt `attempt` (None: the latest). None if the job has no
    such rank or attempt."""
    row = JobRank.objects.filter(job=job, index=rank).select_related("instance").first()
    if row is None:
        return None
    instance = row.instance
    pods = Workload.objects.filter(pk=instance.pk).values_list("pods_made", flat=True).first()
    latest = max((pods or 0) - 1, 0)
    wanted = latest if attempt is None else attempt
    if wanted > latest:
        return None
    kept = WorkloadLog.objects.filter(instance=instance, attempt=wanted).first()
    live = (
        wanted == latest
        and bool(pods)
        and instance.status in LIVE
        and not (kept is not None and kept.complete)
    )
    if kept is None and not live and attempt is not None:
        return None
    return LogSource(instance=instance, attempt=wanted, live=live, kept=kept)


def log_text(source: LogSource, *, tail: int | None) -> str:
    text = source.kept.text if source.kept is not None else ""
    if tail is not None:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-tail:]) if tail else ""
    return text


def log_follow(
    source: LogSource, *, tail: int | None, timeout_s: float, poll_s: float = FOLLOW_POLL_S
) -> Iterator[bytes]:
    """The rank's output, then what the worker ships of it as it comes (read from the database
    every `poll_s`), until the attempt is over or `timeout_s` has passed (a follower asks
    again: no request holds a web thread for ever)."""
    text = log_text(source, tail=tail)
    if text:
        yield text.encode()
    if not source.live:
        return
    sent = len(source.kept.text) if source.kept is not None else 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        # only what is new of the kept text (up to 1 MiB), and its length
        row = (
            WorkloadLog.objects.filter(instance=source.instance, attempt=source.attempt)
            .values_list(Substr("text", sent + 1), Length("text"), "complete")
            .first()
        )
        status = Instance.objects.values_list("status", flat=True).get(pk=source.instance.pk)
        new, length, complete = row if row is not None else ("", 0, False)
        if length < sent:  # the kept text was cut at its front (WORKLOAD_LOG_BYTES): resend
            sent, new = (
                0,
                WorkloadLog.objects.values_list("text", flat=True).get(
                    instance=source.instance, attempt=source.attempt
                ),
            )
        if new:
            yield new.encode()
            sent += len(new)
        if complete or status not in LIVE:
            return
