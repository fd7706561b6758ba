"""What the console and the API read of a job: its view (ranks, cost), its events, its logs."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db.models import Sum

from instances.choices import InstanceStatus
from instances.models import Instance, Workload, WorkloadLog
from jobs.models import Job, JobEvent, JobRank
from starverse.core import kube

S = InstanceStatus
# A rank's pod serves its own output while it lives (a live follow reads it).
LIVE = (S.PROVISIONING, S.CHECKING, S.RUNNING, S.STOPPING)


def job_cost_fen(job: Job) -> int:
    """What its ranks have cost (their instances' charged minutes)."""
    spent = Instance.objects.filter(job_rank__job=job).aggregate(total=Sum("cost_fen"))["total"]
    return int(spent or 0)


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
    """Where a rank's output of one attempt is: its live pod, or what was kept of it."""

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
    kept = WorkloadLog.objects.filter(instance=instance, attempt=wanted).first()
    live = wanted == latest and kept is None and instance.status in LIVE and bool(pods)
    if kept is None and not live and attempt is not None:
        return None
    return LogSource(instance=instance, attempt=wanted, live=live, kept=kept)


def log_text(source: LogSource, *, tail: int | None) -> str:
    if source.kept is not None:
        text = source.kept.text
    elif source.live:
        text = kube.pod_log(
            source.instance.k8s_namespace, source.instance.k8s_name, tail_lines=tail
        )
    else:
        return ""
    if tail is not None:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-tail:]) if tail else ""
    return text


def log_follow(source: LogSource, *, tail: int | None, timeout_s: float) -> Iterator[bytes]:
    """The rank's output as it comes while its pod lives; what was kept, at once, after."""
    if not source.live:
        yield log_text(source, tail=tail).encode()
        return
    yield from kube.pod_log_follow(
        source.instance.k8s_namespace,
        source.instance.k8s_name,
        tail_lines=tail,
        timeout_s=timeout_s,
    )
