from typing import Any

from django.apps import AppConfig

from instances.signals import gang_checking, gang_over_budget
from starverse.core.dispatch import enqueue_on_commit


def preflight_on_gang_checking(sender: Any, gang: str, **kwargs: Any) -> None:
    """Receiver of instances' `gang_checking` (the gang: a cluster's id): a rank is up (or its
    check went quiet), so the cluster's pre-flight round is looked at once the move commits; it
    runs when every rank is checking."""
    enqueue_on_commit("clusters.tasks.preflight_cluster", gang)


def stop_on_over_budget(sender: Any, gang: str, **kwargs: Any) -> None:
    """Receiver of instances' `gang_over_budget`: the rest of the cluster stops with the
    rank the budget stopped, never half of it running."""
    enqueue_on_commit("clusters.tasks.stop_cluster_over_budget", gang)


class ClustersConfig(AppConfig):
    name = "clusters"
    verbose_name = "Clusters"

    def ready(self) -> None:
        from clusters.ranks import RankHooks
        from instances.gangs import gang_hooks_register

        gang_hooks_register(RankHooks())
        gang_checking.connect(preflight_on_gang_checking, dispatch_uid="clusters-preflight")
        gang_over_budget.connect(stop_on_over_budget, dispatch_uid="clusters-budget-stop")
