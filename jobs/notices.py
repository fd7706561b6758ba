"""A job's end, by e-mail to whoever submitted it and, in a team, its owners and admins."""

import logging

from billing.notices import mail_about_instance
from jobs.models import Job, JobEvent
from jobs.selectors import job_cost_fen
from starverse.core.money import format_fen

logger = logging.getLogger(__name__)
LAST_LINES = 20


def job_ended_mail(job_id: str) -> None:
    job = Job.objects.filter(pk=job_id).first()
    if job is None or job.finished_at is None:
        return
    last = JobEvent.objects.filter(job=job).order_by("-at", "-id").first()
    mail_about_instance(
        job.tenant_id,
        job.created_by_id,
        "jobs/email/ended.txt",
        {
            "status": job.status,
            "job_name": job.name,
            "job_id": job.id,
            "restarts": job.restarts,
            "reason": last.text if last else job.status,
            "cost": format_fen(job_cost_fen(job), symbol=False),
            "last_lines": "\n".join(job.message.splitlines()[-LAST_LINES:]),
        },
    )
    logger.info("job.mail_sent job=%s status=%s", job.id, job.status)
