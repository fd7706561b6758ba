"""instances.states._transitions, the one transition path for one instance or several together
(a cluster's ranks, ranks_mark_running): every instance is checked against the transition table
before any is written, so a batch one member of which may not move is refused whole."""

import pytest
from django.db import transaction

from instances.models import Instance, InstanceEvent
from instances.states import instance_locked, ranks_mark_running
from starverse.core.errors import Conflict
from tests.factories import make_instance, make_user


def test_a_batch_transition_refused_for_one_instance_writes_none(db):
    user = make_user()
    first, second = make_instance(user), make_instance(user)  # queued: no nodes here
    events = InstanceEvent.objects.count()

    with transaction.atomic():
        rows = [instance_locked(first.id), instance_locked(second.id)]
        # the first as the caller would hold it once checking (the move is allowed for it),
        # the second still queued (queued → running is not)
        rows[0].status = "checking"
        with pytest.raises(Conflict) as refused:
            ranks_mark_running(rows, "Pre-flight check passed. Running: billing started.")

    assert refused.value.code == "wrong_state"
    assert list(
        Instance.objects.filter(pk__in=[first.id, second.id])
        .order_by("pk")
        .values_list("status", "session", "running_since", "started_at")
    ) == [("queued", 0, None, None), ("queued", 0, None, None)]
    assert InstanceEvent.objects.count() == events
