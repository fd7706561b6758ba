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
  image that cannot be pulled): the job failed, with the instance's reason.
"""

import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from clusters.choices import Template
from compute.orders import OrderKey, order_commit, ordered_before, request_hash_of
from events.choices import EventType
from events.emit import emit_about
from fleet.models import DEFAULT_REGION
from instances.choices import InstanceStatus
from instances.lifecycle import instance_order, instance_start, instance_terminate
from instances.models import Instance, InstanceEvent, Workload
from jobs.choices import ENDED, JobStatus
from jobs.models import Job, JobEvent, JobRank
from starverse.accounts.models import User
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, FieldInvalid, InvalidInput, ServiceError
from starverse.core.text import Deferred, later
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


def job_dns(job_id: str) -> str:
    """The job's id as Kubernetes labels and names take it (DNS: lower case, no underscore)."""
    return job_id.lower().replace("_", "-")


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
        instance, _created = instance_order(
            user=user,
            offering_id=request.offering_id,
            image_id=request.image_id,
            name=job.name,
            disks=job.disks,
            auto_recover=True,  # a lost node's rank moves, its program starts again
            idle_stop=None,  # a job's GPUs may idle (data loading, a checkpoint): it ends itself
            region=DEFAULT_REGION if nas else "",  # the NAS lives in the default region
            workload=_workload(job),
        )
        JobRank.objects.create(job=job, instance=instance, index=0)
        _event(job, J.QUEUED, later(SUBMITTED))
        _follow(job, instance)
        return job

    job, created = order_commit(Job.objects.all(), key, "job", order_once)
    if created:
        logger.info("job.submitted job=%s offering=%s", job.id, request.offering_id)
    return job, created


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
    if request.node_count != 1:
        raise _invalid(
            _(
                "A job runs on one node for now (1 to 8 GPUs, or a whole node). For several "
                "nodes, order a cluster: it gets the same environment and launch templates."
            ),
            field="node_count",
            code="invalid_node_count",
        )
    if request.template != Template.NONE:
        raise _invalid(
            _("Launch templates apply to multi-node jobs; a one-node job runs its command."),
            field="template",
        )
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
    argv = ["bash", "-lc", job.command] if job.command else ["bash", "-c", job.script, job.name]
    env = {
        **job.env,
        "STARVERSE_JOB_ID": job.id,
        "STARVERSE_CHECKPOINT_DIR": job.checkpoint_dir,
    }
    return Workload(owner=job.id, argv=argv, env=env, labels={JOB_LABEL: job_dns(job.id)})


def _event(job: Job, status: str, message: Deferred | str) -> None:
    JobEvent.objects.create(job=job, status=status, message=message)


# --- following the ranks -----------------------------------------------------------------


def job_locked(job_id: str) -> Job:
    return Job.objects.select_for_update().get(pk=job_id)


def job_sync(job_id: str) -> str:
    """Bring the job in line with its rank: the one transition its rank's state calls for, if
    any (see the module's docstring). Safe to call at any moment, twice, or concurrently (the
    job's row is locked). Returns the job's status."""
    with transaction.atomic():
        job = job_locked(job_id)
        if job.status in ENDED:
            return job.status
        rank = job.ranks.select_related("instance").get(index=0)
        instance = rank.instance
        workload = Workload.objects.get(pk=instance.pk)
        _follow(job, instance, workload)
    return job.status


def _follow(job: Job, instance: Instance, workload: Workload | None = None) -> None:
    now = timezone.now()
    if workload is None:
        workload = Workload.objects.filter(pk=instance.pk).first()
    restarts = max((workload.pods_made if workload else 0) - 1, 0)
    # a new pod runs the program since the job last looked (it may have been lost, placed
    # again and started between two looks)
    new_pod = restarts > job.restarts
    if restarts != job.restarts:
        job.restarts = restarts
        job.save(update_fields=["restarts"])
    if job.status == J.CANCELLING:
        if instance.status == S.TERMINATED:
            _end(job, J.CANCELLED, later(gettext_noop("Cancelled.")), now=now)
        return
    if workload is not None and workload.exit_code is not None:
        _program_ended(job, instance, workload, now=now)
        return
    if job.restart_pending and instance.status in (S.STOPPED, S.FAILED):
        # it starts again (rank_restart); sent again here in case its task was lost
        enqueue_on_commit("jobs.tasks.restart_rank", instance.pk)
        return
    if instance.status == S.STOPPING:
        return  # it stops (then ends the job below), or it starts again once stopped
    if instance.status in (S.STOPPED, S.FAILED, S.TERMINATED, S.TERMINATING):
        reason = _last_words(instance)
        _end_with_instance(
            job,
            instance,
            J.FAILED,
            later(gettext_noop("It stopped before its program ended: %(reason)s"))
            % {"reason": reason},
            now=now,
        )
        return
    if instance.status == S.RUNNING:
        _follow_running(job, instance, new_pod=new_pod, now=now)
    else:
        _follow_waiting(job, instance)


def _node_of(instance: Instance) -> str:
    return instance.node.name if instance.node else "-"


def _follow_running(job: Job, instance: Instance, *, new_pod: bool, now: Any) -> None:
    """Its rank runs: the job runs (from its first start; again after a restart), or it has run
    past its time limit."""
    if job.status != J.RUNNING or new_pod:
        first = job.started_at is None
        job.started_at = job.started_at or now
        _move(
            job,
            J.RUNNING,
            later(gettext_noop("Started on %(node)s.")) % {"node": _node_of(instance)}
            if first
            else later(gettext_noop("Running again on %(node)s (restart %(n)s)."))
            % {"node": _node_of(instance), "n": job.restarts},
        )
    elif _past_time_limit(job, now):
        _end_with_instance(
            job,
            instance,
            J.FAILED,
            later(gettext_noop("Stopped at its time limit of %(minutes)s minutes."))
            % {"minutes": job.time_limit_minutes},
            now=now,
        )


def _follow_waiting(job: Job, instance: Instance) -> None:
    """Its rank is queued or being placed: before the first start, the job waits (placed);
    after it, its rank was lost and is placed again (recovering)."""
    if job.started_at is not None and job.status in (J.RUNNING, J.RECOVERING):
        if job.status == J.RUNNING:
            _move(
                job,
                J.RECOVERING,
                later(gettext_noop("Its rank was lost (%(reason)s); placing it again."))
                % {"reason": _last_words(instance)},
            )
        return
    waiting = J.QUEUED if instance.status == S.QUEUED else J.PROVISIONING
    if job.status != waiting and job.status in (J.QUEUED, J.PROVISIONING):
        _move(
            job,
            waiting,
            later(gettext_noop("Placed on %(node)s.")) % {"node": _node_of(instance)},
        )


def _program_ended(job: Job, instance: Instance, workload: Workload, *, now: Any) -> None:
    code = workload.exit_code
    job.exit_code = code
    if code == 0:
        _end_with_instance(
            job, instance, J.SUCCEEDED, later(gettext_noop("Finished (exit code 0).")), now=now
        )
        return
    if job.error_restarts < job.max_restarts and not _past_time_limit(job, now):
        job.error_restarts += 1
        job.restart_pending = True
        job.save(update_fields=["exit_code", "error_restarts", "restart_pending"])
        _move(
            job,
            J.RECOVERING,
            later(
                gettext_noop(
                    "Its program failed with exit code %(code)s; running it again "
                    "(%(n)s of %(most)s restarts after an error)."
                )
            )
            % {"code": code, "n": job.error_restarts, "most": job.max_restarts},
        )
        Workload.objects.filter(pk=instance.pk).update(exit_code=None, finished_at=None)
        enqueue_on_commit("jobs.tasks.restart_rank", instance.pk)
        return
    job.message = workload.message
    _end_with_instance(
        job,
        instance,
        J.FAILED,
        later(gettext_noop("Failed with exit code %(code)s.")) % {"code": code},
        now=now,
    )


def rank_restart(instance_id: str) -> None:
    """Start a rank whose program failed again, once its instance has stopped (the start goes
    through admission and the queue like any start), under the job's lock: sent twice (the
    sweep sends it again in case its task was lost), it starts once. A start refused (an empty
    balance, a limit) ends the job with the refusal's reason."""
    rank = JobRank.objects.get(pk=instance_id)
    with transaction.atomic():
        job = job_locked(rank.job_id)
        if not job.restart_pending or job.status != J.RECOVERING:
            return
        status = Instance.objects.values_list("status", flat=True).get(pk=instance_id)
        if status == S.STOPPING:
            raise StillStopping(instance_id)
        if status not in (S.STOPPED, S.FAILED):
            return
        job.restart_pending = False
        job.save(update_fields=["restart_pending"])
        try:
            with transaction.atomic():
                instance_start(instance_id=instance_id, by_owner=True)
        except ServiceError as error:
            instance = Instance.objects.get(pk=instance_id)
            _end_with_instance(
                job,
                instance,
                J.FAILED,
                later(gettext_noop("It could not start again: %(reason)s"))
                % {"reason": error.message},
                now=timezone.now(),
            )


class StillStopping(Exception):
    """The rank's instance is still stopping: start it once stopped (the task retries)."""


def _past_time_limit(job: Job, now: Any) -> bool:
    limit = job.time_limit_minutes
    return bool(limit and job.started_at and now - job.started_at >= timedelta(minutes=limit))


# What a job's move to each status reports (events.emit); the other moves report nothing.
JOB_EVENTS = {
    J.RUNNING: EventType.JOB_STARTED,
    J.RECOVERING: EventType.JOB_RECOVERING,
    J.SUCCEEDED: EventType.JOB_SUCCEEDED,
    J.FAILED: EventType.JOB_FAILED,
}


def _move(job: Job, status: str, message: Deferred) -> None:
    job.status = status
    job.save()
    _event(job, status, message)
    if kind := JOB_EVENTS.get(JobStatus(status)):
        emit_about(job, kind, restarts=job.restarts, exit_code=job.exit_code)


def _end_with_instance(
    job: Job, instance: Instance, status: str, message: Deferred, *, now: Any
) -> None:
    """End the job and give its rank's GPUs back (terminated: its own disk goes, its cloud
    disks and the NAS keep their data)."""
    if instance.status not in (S.TERMINATING, S.TERMINATED):
        instance_terminate(instance_id=instance.pk, by_owner=True)
    _end(job, status, message, now=now)


def _end(job: Job, status: str, message: Deferred, *, now: Any) -> None:
    job.finished_at = now
    _move(job, status, message)
    enqueue_on_commit("jobs.tasks.mail_job_ended", job.id)
    logger.info("job.ended job=%s status=%s exit_code=%s", job.id, status, job.exit_code)


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
        _move(job, J.CANCELLING, later(gettext_noop("Cancel requested; billing stopped.")))
    enqueue_on_commit("jobs.tasks.sync_job", job.id)
    logger.info("job.cancelled job=%s", job.id)
    return job
