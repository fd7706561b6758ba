"""What a job's rank is to the instances app's pages (instances.gangs.workload_owner_link)."""

from django.urls import reverse
from django.utils.translation import gettext as _

from instances.models import Instance
from jobs.models import JobRank


def rank_link(instance: Instance, owner: str) -> tuple[str, str]:
    """("rank 0 of the job “sft”", the job's console page)."""
    row = JobRank.objects.select_related("job").get(pk=instance.pk)
    said = _("rank %(rank)s of the job “%(name)s”") % {"rank": row.index, "name": row.job.name}
    return said, reverse("jobs:detail", args=[row.job_id])
