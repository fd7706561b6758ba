"""Provisioning records its pod's uid (and that its objects exist) under the instance's lock,
taken before the pod watch's: a transition holds the instance and then saves its pod watch, so
the other order deadlocked (seen once in the CLI's live journey, where the live server's task
and the test's converge provisioned the same instance). Here the transition holds the instance
while provisioning records the uid: provisioning waits, then both finish."""

import threading

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from compute.models import Offering
from instances.lifecycle import instance_order
from instances.models import PodWatch
from instances.provisioning import converge
from instances.states import instance_locked
from tests.conftest import run_threads
from tests.factories import CLOUD_GPU, IMAGE, fund, make_user

_WAITING = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
)


@pytest.mark.django_db(transaction=True)
def test_recording_the_pod_uid_waits_for_a_transition_instead_of_deadlocking():
    call_command("seed_catalog", verbosity=0)
    user = make_user()
    fund(user, 1_000_000)
    instance, _ = instance_order(
        user=user, offering_id=Offering.objects.get(name=CLOUD_GPU).id, image_id=IMAGE
    )  # queued: no nodes here, but its pod watch is there
    holding, go_on = threading.Event(), threading.Event()

    def work(index: int) -> str:
        if index == 0:  # a transition: the instance locked, then its pod watch saved
            with transaction.atomic():
                instance_locked(instance.id)
                holding.set()
                assert go_on.wait(timeout=20)
                PodWatch.objects.filter(instance_id=instance.id).update(
                    events_read_at=timezone.now()
                )
            return "transition"
        assert holding.wait(timeout=20)
        fresh = type(instance).objects.select_related("pod_watch").get(pk=instance.id)
        converge._pod_uid_learn(fresh, {"metadata": {"uid": "uid-of-the-new-pod"}})
        return "recorded"

    def release_when_provisioning_waits() -> None:
        for _ in range(400):
            with connection.cursor() as cursor:
                cursor.execute(_WAITING)
                if cursor.fetchone()[0]:
                    break
            threading.Event().wait(0.05)
        go_on.set()
        connection.close()

    releaser = threading.Thread(target=release_when_provisioning_waits)
    releaser.start()
    results = run_threads(2, work)
    releaser.join(timeout=30)

    assert results == ["transition", "recorded"]
    watch = PodWatch.objects.get(instance_id=instance.id)
    assert watch.pod_uid == "uid-of-the-new-pod" and watch.events_read_at is not None
