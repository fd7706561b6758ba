"""Jobs: submit, cancel, and the state machine that follows a job's ranks (jobs.models).

A job's rank is an instance that runs the job's program to its end (instances.models.Workload):
ordered through instances.lifecycle.instance_order, so admission (the runway, the limits, trial
credit), the queue, placement and per-minute metering are the instances' own, and an instance
that loses its node moves with its disks (auto_recover) and runs the program again. The job
only decides what its ranks' ends mean (job_sync):
- the program exited 0: the job succeeded, its instance is terminated (its GPUs were given
  back when the program ended; cloud disks and the NAS keep their data);
- it exited otherwise: the user's error; run again while `max_restarts` allows (the instance
  starts again, through admission and the queue like any start), else the job failed with
  the exit code and the program's last lines;
- the instance provisions again after running (its node lost, its pod evicted or gone): the
  platform's failure, the job is recovering, billing paused by the instance, and the program
  starts again with STARVERSE_RESTART_COUNT one higher and the same checkpoint directory;
- the instance stopped or failed without its program ending (a budget, an empty balance, an
  image that cannot be pulled): the job failed, with the instance's reason;
- a spot job's instance was taken back for a paying order (stop_reason "preempted"): the job
  is recovering and its rank starts again, in line for GPUs, once stopped.
A program's failure, a preemption and a lost node or pod all recover by one path, with its
rules per cause in one table: jobs.recovery.
"""

import logging
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Case, IntegerField, Value, When
from django.db.models.functions import Substr
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from clusters.choices import Template
from clusters.pods import job_launch_line
from clusters.services import cluster_order
from compute.choices import OfferingKind
from compute.models import Offering
from compute.orders import OrderKey, order_commit, ordered_before, request_hash_of
from fleet.models import DEFAULT_REGION
from instances.choices import InstanceStatus
from instances.lifecycle import instance_order, instance_terminate, spot_wait_valid
from instances.models import Instance, InstanceEvent, Workload, WorkloadLog
from instances.preemption import PREEMPTED
from jobs.choices import ENDED, JobStatus
from jobs.models import Job, JobEvent, JobRank
from jobs.recovery import Cause, Lost, job_recover
from jobs.resume import resumed_step
from jobs.states import (
    job_end,
    job_end_with_ranks,
    job_locked,
    job_move,
    job_note,
    past_time_limit,
    rank_instances,
)
from starverse.accounts.models import User
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, FieldInvalid, InvalidInput
from starverse.core.kube import id_label
from starverse.core.text import later
from storage.nas import nas_for_tenant

logger = logging.getLogger(__name__)
S = InstanceStatus
J = JobStatus

MAX_ENV = 100
MAX_ENV_VALUE = 32 * 1024
MAX_COMMAND = 64 * 1024
MAX_RESTARTS = 100
MAX_TIME_LIMIT_MINUTES = 60 * 24 * 90
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What the platform sets in every rank: a job's env may not change them.
RESERVED_ENV = re.compile(
    r"^(STARVERSE_|NVIDIA_|CUDA_VISIBLE_DEVICES$|KUBERNETES_|HOME$|PATH$|HOSTNAME$)"
)
JOB_LABEL = "starverse.io/job"
SUBMITTED = gettext_noop("Submitted.")
RESUMED = gettext_noop("Resumed from step %(step)s (restart %(attempt)s).")
MULTI_NODE_GPUS = 8  # a job of several nodes takes whole nodes of this many GPUs
NODES_NAMED = 4  # a timeline line names this many of a job's nodes
RESUME_READ_KEEP_S = 7 * 24 * 3600  # what _log_news read of an attempt, kept this long


def job_dns(job_id: str) -> str:
    """The job's id as Kubernetes labels and names take it (DNS: lower case, no underscore)."""
    return id_label(job_id)


@dataclass(frozen=True)
class JobRequest:
    """What a job order asks for (the API's fields), checked by `checked`."""

    offering_id: str
    image_id: str
    command: str = ""
    script: str = ""
    name: str = ""
    node_count: int = 1
    env: dict[str, str] | None = None
    checkpoint_dir: str = ""
    max_restarts: int = 3
    time_limit_minutes: int | None = None
    template: str = Template.NONE
    disks: list[str] | None = None
    nas: bool | None = None
    notes: list[str] | None = None
    billing: str = "hourly"
    spot_max_wait_minutes: int | None = None

    def hash(self) -> str:
        return request_hash_of(
            offering=self.offering_id,
            image=self.image_id,
            command=self.command,
            script=self.script,
            name=self.name,
            node_count=self.node_count,
            env=self.env or {},
            checkpoint_dir=self.checkpoint_dir,
            max_restarts=self.max_restarts,
            time_limit_minutes=self.time_limit_minutes,
            template=self.template,
            disks=sorted(self.disks or []),
            nas=self.nas,
            **({"billing": self.billing} if self.billing != "hourly" else {}),
            **(
                {"spot_max_wait_minutes": self.spot_max_wait_minutes}
                if self.spot_max_wait_minutes is not None
                else {}
            ),
        )


def job_submit(*, user: User, request: JobRequest, idempotency_key: str = "") -> tuple[Job, bool]:
    """Submit a job: its rank is ordered now (placed, or queued behind earlier orders for the
    same GPUs, as any instance). Returns (job, created); the same Idempotency-Key answers the
    same job."""
    key = OrderKey(user.tenant_id, idempotency_key, request.hash())
    if (earlier := ordered_before(Job.objects.all(), key, "job")) is not None:
        return earlier, False
    _check(request)
    nas = _nas_wanted(user, request.nas)

    def order_once() -> Job:
        job = Job(
            tenant_id=user.tenant_id,
            created_by=user,
            name=request.name.strip() or "job",
            offering_id=request.offering_id,
            image_id=request.image_id,
            node_count=request.node_count,
            command=request.command,
            script=request.script,
            env=dict(request.env or {}),
            max_restarts=request.max_restarts,
            time_limit_minutes=request.time_limit_minutes,
            template=request.template,
            disks=list(request.disks or []),
            nas=nas,
            notes=list(request.notes or []),
            idempotency_key=key.idempotency_key,
            request_hash=key.request_hash,
        )
        job.checkpoint_dir = request.checkpoint_dir or _checkpoint_default(job)
        job.save()
        instances = _ranks_order(
            job, user, billing=request.billing, max_wait=request.spot_max_wait_minutes
        )
        JobRank.objects.bulk_create(
            JobRank(job=job, instance=instance, index=index)
            for index, instance in enumerate(instances)
        )
        job_note(job, J.QUEUED, later(SUBMITTED))
        _follow(job, instances, _workloads(instances))
        return job

    job, created = order_commit(Job.objects.all(), key, "job", order_once)
    if created:
        logger.info("job.submitted job=%s offering=%s", job.id, request.offering_id)
    return job, created


def _ranks_order(
    job: Job, user: User, *, billing: str, max_wait: int | None = None
) -> list[Instance]:
    """Order the job's ranks, each running the job's program: one instance; or, for several
    nodes, a cluster the job owns (clusters.services.cluster_order: one gang of whole nodes,
    placed or queued together, its pre-flight check before the program starts, the launchers'
    environment and hostfiles), rank i with the job's i-th cloud disk. A spot job's ranks wait
    at most `max_wait` minutes for GPUs, then fail at no cost, and the job with them."""
    region = DEFAULT_REGION if job.nas else ""  # the NAS lives in the default region
    if job.node_count == 1:
        instance, _created = instance_order(
            user=user,
            offering_id=job.offering_id,
            image_id=job.image_id,
            name=job.name,
            disks=job.disks,
            auto_recover=True,  # a lost node's rank moves, its program starts again
            idle_stop=None,  # a job's GPUs may idle (data loading, a checkpoint): it ends itself
            region=region,
            workload=_workload(job),
            billing=billing,
            spot_max_wait_minutes=max_wait,
        )
        return [instance]
    cluster, _created = cluster_order(
        user=user,
        offering_id=job.offering_id,
        image_id=job.image_id,
        node_count=job.node_count,
        template=job.template,
        name=job.name,
        disks=[[disk] for disk in job.disks],
        region=region,
        workload=_workload(job),
        owner=job.id,
        billing=billing,
        spot_max_wait_minutes=max_wait,
    )
    job.cluster = cluster
    job.save(update_fields=["cluster"])
    return [row.instance for row in cluster.ranks.select_related("instance").order_by("index")]


def _workloads(instances: list[Instance]) -> dict[str, Workload]:
    return {w.pk: w for w in Workload.objects.filter(pk__in=[i.pk for i in instances])}


def _invalid(message: str, *, field: str, code: str | None = None) -> FieldInvalid:
    return FieldInvalid(field, message, code=code)


def _check(request: JobRequest) -> None:
    if bool(request.command.strip()) == bool(request.script.strip()):
        raise InvalidInput(
            _("Give the job a command or a script (one of them)."), code="invalid_command"
        )
    if len(request.command) + len(request.script) > MAX_COMMAND:
        raise _invalid(
            _("The command or script is longer than %(n)s KiB: put it in a file on the NAS.")
            % {"n": MAX_COMMAND // 1024},
            field="script" if request.script else "command",
        )
    _check_nodes(request)
    if not 0 <= request.max_restarts <= MAX_RESTARTS:
        raise _invalid(_("max_restarts is 0 to %(n)s.") % {"n": MAX_RESTARTS}, field="max_restarts")
    limit = request.time_limit_minutes
    if limit is not None and not 1 <= limit <= MAX_TIME_LIMIT_MINUTES:
        raise _invalid(
            _("time_limit_minutes is 1 to %(n)s (90 days).") % {"n": MAX_TIME_LIMIT_MINUTES},
            field="time_limit_minutes",
        )
    if request.checkpoint_dir and not request.checkpoint_dir.startswith("/"):
        raise _invalid(
            _("checkpoint_dir is an absolute path in the container, e.g. /nas/checkpoints/run1."),
            field="checkpoint_dir",
        )
    _check_env(request.env or {})
    spot_wait_valid(request.billing, request.spot_max_wait_minutes)


def _check_nodes(request: JobRequest) -> None:
    """1 to CLUSTER_MAX_NODES nodes; several are whole nodes of an 8-GPU offering (checked
    against the catalog by the cluster order), a template only for several, and one cloud
    disk per rank at most."""
    most = settings.CLUSTER_MAX_NODES
    if not 1 <= request.node_count <= most:
        raise _invalid(
            _("node_count is 1 to %(most)s; a job of several nodes takes whole 8-GPU nodes.")
            % {"most": most},
            field="node_count",
            code="invalid_node_count",
        )
    if request.template != Template.NONE and request.script.strip():
        raise _invalid(
            _(
                "A launch template runs a command on every rank (your training script and its "
                "arguments); give a command, or no template with a script."
            ),
            field="template",
        )
    if request.node_count == 1:
        if request.template != Template.NONE:
            raise _invalid(
                _("Launch templates apply to multi-node jobs; a one-node job runs its command."),
                field="template",
            )
        return
    offering = Offering.objects.filter(pk=request.offering_id).first()
    if offering is not None and (
        offering.kind != OfferingKind.BARE_METAL or offering.gpu_count != MULTI_NODE_GPUS
    ):
        raise _invalid(
            _(
                "A job of several nodes takes whole nodes: choose a bare-metal offering of "
                "%(gpus)s GPUs, or set node_count to 1."
            )
            % {"gpus": MULTI_NODE_GPUS},
            field="offering",
            code="not_whole_node",
        )
    if len(request.disks or []) > request.node_count:
        raise _invalid(
            _(
                "A job of several nodes takes one cloud disk per rank at most (rank i gets the "
                "i-th); %(given)s disks were given for %(nodes)s nodes."
            )
            % {"given": len(request.disks or []), "nodes": request.node_count},
            field="disks",
        )


def _check_env(env: dict[str, str]) -> None:
    if len(env) > MAX_ENV:
        raise _invalid(_("At most %(n)s variables.") % {"n": MAX_ENV}, field="env")
    for name, value in env.items():
        if not ENV_NAME.match(name):
            raise _invalid(
                _("%(name)s is not a variable name (letters, digits and _, not first a digit).")
                % {"name": name[:64]},
                field="env",
            )
        if RESERVED_ENV.match(name):
            raise _invalid(
                _("%(name)s is set by the platform in every job; choose another name.")
                % {"name": name},
                field="env",
            )
        if not isinstance(value, str) or len(value) > MAX_ENV_VALUE:
            raise _invalid(
                _("The value of %(name)s must be a string of at most 32 KiB.") % {"name": name},
                field="env",
            )


def _nas_wanted(user: User, nas: bool | None) -> bool:
    """Whether the job mounts the tenant's NAS: asked (it must exist), else if there is one."""
    have = nas_for_tenant(user.tenant_id) is not None
    if nas and not have:
        raise _invalid(
            _(
                "Your account has no NAS: create one on the Disks page (or PUT /nas), or "
                "submit with nas false and a checkpoint_dir on /root/data or a cloud disk."
            ),
            field="nas",
            code="no_nas",
        )
    return have if nas is None else nas


def _checkpoint_default(job: Job) -> str:
    """Where checkpoints go unless the job says: its own folder on the NAS (every node of every
    attempt sees it), else on the rank's own disk (which moves with it)."""
    if job.nas:
        return f"/nas/checkpoints/{job.id}"
    return f"/root/data/checkpoints/{job.id}"


def _workload(job: Job) -> Workload:
    """The program every rank runs. A template job's command is what its launcher runs on
    each rank (clusters.pods.job_launch_line), with the framework's resume flags."""
    if job.template != Template.NONE and job.command:
        argv = ["bash", "-lc", job_launch_line(job.template, job.command)]
    elif job.command:
        argv = ["bash", "-lc", job.command]
    else:
        argv = ["bash", "-c", job.script, job.name]
    env = {
        **job.env,
        "STARVERSE_JOB_ID": job.id,
        "STARVERSE_CHECKPOINT_DIR": job.checkpoint_dir,
    }
    return Workload(owner=job.id, argv=argv, env=env, labels={JOB_LABEL: job_dns(job.id)})


# --- following the ranks -----------------------------------------------------------------


def job_sync(job_id: str) -> str:
    """Bring the job in line with its ranks: the one transition their states call for, if
    any (see the module's docstring). Safe to call at any moment, twice, or concurrently (the
    job's row is locked). Returns the job's status."""
    with transaction.atomic():
        job = job_locked(job_id)
        if job.status in ENDED:
            return job.status
        instances = rank_instances(job)
        _follow(job, instances, _workloads(instances))
    return job.status


def _follow(job: Job, instances: list[Instance], workloads: dict[str, Workload]) -> None:
    now = timezone.now()
    made = max((w.pods_made for w in workloads.values()), default=0)
    restarts = max(made - 1, 0)
    # a new pod runs the program since the job last looked (it may have been lost, placed
    # again and started between two looks)
    new_pod = restarts > job.restarts
    if restarts != job.restarts:
        job.restarts = restarts
        job.save(update_fields=["restarts"])
    if job.status == J.CANCELLING:
        if all(instance.status == S.TERMINATED for instance in instances):
            job_end(job, J.CANCELLED, later(gettext_noop("Cancelled.")), now=now)
        return
    preempted = next((i for i in instances if i.stop_reason == PREEMPTED), None)
    if preempted is not None and not job.restart_pending:
        lost = Lost(Cause.PREEMPTED, preempted, preempted.node, "taken back for a paying order")
        job_recover(job, instances, lost, now=now)
        return
    ended = {pk: w for pk, w in workloads.items() if w.exit_code is not None}
    failed = next((w for w in ended.values() if w.exit_code != 0), None)
    if failed is not None:
        rank = next(i for i in instances if i.pk == failed.pk)
        lost = Lost(Cause.PROGRAM_FAILED, rank, rank.node, f"exit code {failed.exit_code}", failed)
        job_recover(job, instances, lost, now=now)
        return
    if ended and len(ended) == len(instances):
        job.exit_code = 0
        job_end_with_ranks(
            job, instances, J.SUCCEEDED, later(gettext_noop("Finished (exit code 0).")), now=now
        )
        return
    if job.restart_pending:
        if all(instance.status in (S.STOPPED, S.FAILED) for instance in instances):
            # it starts again (rank_restart); sent again here in case its task was lost
            enqueue_on_commit("jobs.tasks.restart_rank", instances[0].pk)
        return
    _follow_live(job, [i for i in instances if i.pk not in ended], new_pod=new_pod, now=now)


def _follow_live(job: Job, live: list[Instance], *, new_pod: bool, now: Any) -> None:
    """The ranks whose program has not ended (the others finished with 0 and wait for them)."""
    if not live or any(instance.status == S.STOPPING for instance in live):
        return  # it stops (then ends the job), or it starts again once stopped
    gone = next(
        (i for i in live if i.status in (S.STOPPED, S.FAILED, S.TERMINATED, S.TERMINATING)),
        None,
    )
    if gone is not None:
        job_end_with_ranks(
            job,
            rank_instances(job),
            J.FAILED,
            later(gettext_noop("It stopped before its program ended: %(reason)s"))
            % {"reason": _last_words(gone)},
            now=now,
        )
        return
    if all(instance.status == S.RUNNING for instance in live):
        _follow_running(job, live, new_pod=new_pod, now=now)
    else:
        _follow_waiting(job, live)


def _nodes_of(instances: list[Instance]) -> str:
    names = [instance.node.name if instance.node else "-" for instance in instances]
    if len(names) > NODES_NAMED:
        return ", ".join(names[:NODES_NAMED]) + f", … ({len(names)})"
    return ", ".join(names)


def _follow_running(job: Job, instances: list[Instance], *, new_pod: bool, now: Any) -> None:
    """Its ranks run (a multi-node job's once its pre-flight check passed, which opens their
    programs' gates: clusters.gates): the job runs (from its first start; again after a
    restart), or it has run past its time limit."""
    if job.status != J.RUNNING or new_pod:
        first = job.started_at is None
        job.started_at = job.started_at or now
        nodes = _nodes_of(instances)
        job_move(
            job,
            J.RUNNING,
            later(gettext_noop("Started on %(node)s.")) % {"node": nodes}
            if first
            else later(gettext_noop("Running again on %(node)s (restart %(n)s)."))
            % {"node": nodes, "n": job.restarts},
        )
    elif past_time_limit(job, now):
        job_end_with_ranks(
            job,
            rank_instances(job),
            J.FAILED,
            later(gettext_noop("Stopped at its time limit of %(minutes)s minutes."))
            % {"minutes": job.time_limit_minutes},
            now=now,
        )
    if job.status == J.RUNNING:
        _note_resumed(job, instances)


def _note_resumed(job: Job, instances: list[Instance]) -> None:
    """Once per attempt, the timeline's "Resumed from step N" when the attempt's shipped log
    says where its program resumed (jobs.resume: the lowest rank that says it). Looked for while
    the job runs, until found, in what was shipped since the last look only (_log_news)."""
    attempt = job.restarts
    said = JobEvent.objects.filter(job=job, message=RESUMED, params__attempt=str(attempt))
    if said.exists():
        return
    steps = _log_news(job, attempt, [i.pk for i in instances])
    for instance in instances:  # in rank order
        if (step := steps.get(instance.pk)) is not None:
            job_note(job, job.status, later(RESUMED) % {"step": step, "attempt": attempt})
            return


def _log_news(job: Job, attempt: int, instance_ids: list[str]) -> dict[str, int]:
    """The resumed step each rank's log says in the whole lines shipped since the last look
    (their count per rank is kept in the cache: the database sends only the rest of each
    log, however long the attempt runs without saying it; a cache that forgot reads from the
    start again). A log cut at its head (truncated: more than WORKLOAD_LOG_BYTES) is not read
    again: its attempt's first lines, where a program says it resumed, are gone."""
    key = f"jobs:resume-read:{job.pk}:{attempt}"
    read: dict[str, int] = cache.get(key) or {}
    start = Case(
        *(When(instance_id=pk, then=Value(done + 1)) for pk, done in read.items()),
        default=Value(1),
        output_field=IntegerField(),
    )
    rows = (
        WorkloadLog.objects.filter(instance__in=instance_ids, attempt=attempt, truncated=False)
        .annotate(news=Substr("text", start))
        .values_list("instance_id", "news")
    )
    steps = {}
    for instance_id, news in rows:
        whole = news[: news.rfind("\n") + 1]  # a line still being shipped: read next time
        if (step := resumed_step(whole)) is not None:
            steps[instance_id] = step
        read[instance_id] = read.get(instance_id, 0) + len(whole)
    cache.set(key, read, timeout=RESUME_READ_KEEP_S)
    return steps


def _follow_waiting(job: Job, instances: list[Instance]) -> None:
    """Some rank is queued, being placed or checked: before the first start, the job waits
    (placed); after it, a rank was lost and is placed again (recovering)."""
    waiting_one = next(i for i in instances if i.status != S.RUNNING)
    if job.started_at is not None and job.status in (J.RUNNING, J.RECOVERING):
        if job.status == J.RUNNING:
            job_move(
                job,
                J.RECOVERING,
                later(gettext_noop("Its rank was lost (%(reason)s); placing it again."))
                % {"reason": _last_words(waiting_one)},
            )
        return
    queued = any(instance.status == S.QUEUED for instance in instances)
    waiting = J.QUEUED if queued else J.PROVISIONING
    if job.status != waiting and job.status in (J.QUEUED, J.PROVISIONING):
        job_move(
            job,
            waiting,
            later(gettext_noop("Placed on %(node)s.")) % {"node": _nodes_of(instances)},
        )


def _last_words(instance: Instance) -> str:
    """The instance's last step, as its timeline says it (why it stopped or moved)."""
    event = InstanceEvent.objects.filter(instance=instance).order_by("-at", "-id").first()
    return event.text if event else instance.status


def job_cancel(*, job: Job) -> Job:
    """Cancel: its ranks are terminated (billing ends now; cloud disks and the NAS keep their
    data), its logs are kept. An ended job cannot be cancelled."""
    with transaction.atomic():
        job = job_locked(job.pk)
        if job.status in ENDED or job.status == J.CANCELLING:
            if job.status == J.CANCELLING:
                return job
            raise Conflict(
                _("This job has ended (%(status)s); there is nothing to cancel.")
                % {"status": JobStatus(job.status).label.lower()},
                code="wrong_state",
            )
        for rank in job.ranks.all():
            instance_terminate(instance_id=rank.instance_id, by_owner=True)
        job_move(job, J.CANCELLING, later(gettext_noop("Cancel requested; billing stopped.")))
    enqueue_on_commit("jobs.tasks.sync_job", job.id)
    logger.info("job.cancelled job=%s", job.id)
    return job
