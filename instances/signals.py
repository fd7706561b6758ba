"""Signals the apps above instances listen to, so that instances never name their tasks: the
members of a gang (instances.gangs: a cluster's ranks) wait for their owner to check the gang,
and a member was stopped because its member's or team's budget is spent. Sent inside the
transaction that moved the instance; receivers start their work with enqueue_on_commit, so a
rolled-back move starts nothing."""

from django.dispatch import Signal

# kwargs: gang. A member is up and checking (or still is, after its check went quiet): the
# owner checks the gang once every member is checking (a cluster's pre-flight check). Sent
# again freely: at most one check runs at a time.
gang_checking = Signal()

# kwargs: gang. A member was stopped because a budget is spent: the gang stops whole, its
# members still starting or checking too.
gang_over_budget = Signal()

# kwargs: instance_id, exit_code. An instance that runs a program to its end (its Workload: a
# job's) saw the program end and is stopping, its GPUs released once stopped: its owner decides
# what comes next (run it again, or end).
workload_ended = Signal()

# kwargs: instance_id. An instance that runs a program to its end (a job's) lost its node or
# its pod while it held GPUs and waits to be placed again, billing paused: its owner hears of
# it at once (a job is recovering), not at its next look.
workload_lost = Signal()
