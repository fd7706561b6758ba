"""Thin Celery tasks for storage: converge a disk's or a NAS's claim, bill storage, read usage."""

import logging

from celery import Task, shared_task
from django.conf import settings

from starverse.core.kube import KUBE_TASK, KubeError, RetryableKubeError
from storage import billing, provisioning

logger = logging.getLogger(__name__)


@shared_task(**KUBE_TASK)
def ensure_disk(self: Task[[str], None], disk_id: str) -> None:
    try:
        provisioning.disk_ensure(disk_id)
    except KubeError as error:
        if isinstance(error, RetryableKubeError):
            raise
        logger.error("disk.ensure_failed disk=%s error=%s", disk_id, error)


@shared_task(**KUBE_TASK)
def delete_disk(self: Task[[str], None], disk_id: str) -> None:
    try:
        provisioning.disk_remove(disk_id)
    except provisioning.StillDeleting:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S * 5) from None


@shared_task(**KUBE_TASK)
def ensure_nas(self: Task[[str], None], nas_id: str) -> None:
    try:
        provisioning.nas_ensure(nas_id)
    except KubeError as error:
        if isinstance(error, RetryableKubeError):
            raise
        logger.error("nas.ensure_failed nas=%s error=%s", nas_id, error)


@shared_task(**KUBE_TASK)
def delete_nas(self: Task[[str], None], nas_id: str) -> None:
    try:
        provisioning.nas_remove(nas_id)
    except provisioning.StillDeleting:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S * 5) from None


@shared_task(acks_late=True, ignore_result=True)
def bill_storage(tenant_ids: list[str] | None = None) -> None:
    billing.storage_bill(tenant_ids=tenant_ids)


@shared_task(acks_late=True, ignore_result=True)
def refresh_nas_usage() -> None:
    if not settings.KUBECONFIG:
        return
    provisioning.nas_usage_refresh()


def _answer_to_old_name(task: Task[[str], None]) -> None:
    """A claim task queued by the release before storage had its own app carries its old name
    (`instances.tasks.<name>`): serve that name too, by sending the task on under its own, so an
    upgrade drops no disk. Periodic tasks need no such name: beat sends them again."""

    @shared_task(name=f"instances.tasks.{task.__name__}", acks_late=True, ignore_result=True)
    def queued_before_the_split(*args: str) -> None:
        task.delay(*args)


for _claim_task in (ensure_disk, delete_disk, ensure_nas, delete_nas):
    _answer_to_old_name(_claim_task)
