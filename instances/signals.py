"""Signals the apps above instances listen to, so that instances never name their tasks: a
rank of a cluster waits on its cluster's pre-flight check, and a rank was stopped because its
member's or team's budget is spent. Sent inside the transaction that moved the rank; receivers
start their work with enqueue_on_commit, so a rolled-back move starts nothing."""

from django.dispatch import Signal

# kwargs: cluster_id. A rank is up and checking (or still is, after its check went quiet):
# the cluster's pre-flight check runs once every rank is checking. Sent again freely: at most
# one round runs at a time.
rank_checking = Signal()

# kwargs: cluster_id. A rank of the cluster was stopped because a budget is spent: the
# cluster stops whole, its ranks still starting or checking too.
cluster_over_budget = Signal()
