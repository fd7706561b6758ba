"""Thin Celery tasks for clusters: take ids, re-read rows, call a service."""

from celery import Task, shared_task
from django.utils.translation import gettext_noop

from clusters import gates, preflight
from clusters.models import Cluster
from clusters.services import cluster_stop
from starverse.core.errors import Conflict
from starverse.core.kube import KUBE_TASK


@shared_task(**KUBE_TASK)
def preflight_cluster(self: Task[[str], None], cluster_id: str) -> None:
    """Sent for every rank that comes up (instances.signals.gang_checking, heard in
    clusters.apps): the round runs when the last one is up."""
    preflight.preflight_run(cluster_id)


@shared_task(**KUBE_TASK)
def open_gates(self: Task[[str], None], cluster_id: str) -> None:
    """Sent when a pre-flight round passed: every rank's program may start (clusters.gates)."""
    gates.gates_open(cluster_id)


@shared_task(acks_late=True, ignore_result=True)
def reconcile_clusters() -> None:
    """Every RECONCILE_INTERVAL_S: gate openings lost with a worker or the broker sent again."""
    gates.gates_lost_hand_out()


@shared_task(ignore_result=True)
def stop_cluster_over_budget(cluster_id: str) -> None:
    """Sent when the metering tick stopped a rank because its orderer's or its team's budget
    is spent (instances.signals.gang_over_budget, heard in clusters.apps): the rest of the
    cluster stops with it, never half of it running."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return
    try:
        cluster_stop(
            cluster=cluster,
            reason=gettext_noop("Budget spent: stopped (not deleted); disks kept."),
        )
    except Conflict:  # every rank stopped already
        return
