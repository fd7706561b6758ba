"""Signals the apps above the fleet listen to. Sent inside the transaction that moved the node;
receivers start their work with enqueue_on_commit, so a rolled-back move starts nothing."""

from django.dispatch import Signal

# kwargs: node_id, state, reason. A node left service (draining, cordoned, down, under
# review): the instances app tells the instances on it (fails, recovers or warns them).
node_out_of_service = Signal()
