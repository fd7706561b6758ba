from typing import Any

from django.apps import AppConfig

from instances.signals import cluster_over_budget, rank_checking
from starverse.core.dispatch import enqueue_on_commit


def preflight_on_rank_checking(sender: Any, cluster_id: str, **kwargs: Any) -> None:
    """Receiver of instances' `rank_checking`: a rank is up (or its check went quiet), so the
    cluster's pre-flight round is looked at once the move commits; it runs when every rank is
    checking."""
    enqueue_on_commit("clusters.tasks.preflight_cluster", cluster_id)


def stop_on_over_budget(sender: Any, cluster_id: str, **kwargs: Any) -> None:
    """Receiver of instances' `cluster_over_budget`: the rest of the cluster stops with the
    rank the budget stopped, never half of it running."""
    enqueue_on_commit("clusters.tasks.stop_cluster_over_budget", cluster_id)


class ClustersConfig(AppConfig):
    name = "clusters"
    verbose_name = "Clusters"

    def ready(self) -> None:
        rank_checking.connect(preflight_on_rank_checking, dispatch_uid="clusters-preflight")
        cluster_over_budget.connect(stop_on_over_budget, dispatch_uid="clusters-budget-stop")
