"""Interruptible (spot) capacity on PostgreSQL and the Kubernetes emulator: a spot rental is
billed at the spot price in cash; it takes only GPUs no paying order waits for and never delays
one; an hourly order that finds no free GPUs takes spot ones back (the fewest holdings, the
youngest first, a whole cluster or nothing) with notice (the deadline in
/etc/starverse/preempt, SIGTERM through a graceful deletion of SPOT_PREEMPT_GRACE_S), billing
stopping at the notice; the preempted instance stops with its disk and says so."""

from datetime import UTC, timedelta

import pytest
from django.utils import timezone

from billing.models import LedgerTransaction, Wallet
from compute.metering import meter_tick
from compute.models import Allocation, Holding, Offering
from compute.preemption import preemption_rate
from compute.queue import positions, waits_ahead
from instances.lifecycle import instance_order, instance_terminate, queue_drain, queue_review
from instances.models import Instance
from instances.provisioning import converge
from jobs.models import Job, JobEvent
from jobs.recovery import rank_restart
from jobs.services import job_sync
from starverse.core import kube
from starverse.core.errors import InsufficientBalance, InvalidInput
from tests.factories import (
    converge_until,
    fund,
    make_cluster,
    make_operator,
    make_user,
    staff_login,
)

IMAGE = "pytorch-2.1"
RTX = "NVIDIA GeForce RTX 4090"


def _offering(name):
    return Offering.objects.get(name=name)


def _order(user, name, billing="hourly", **more):
    instance, _created = instance_order(
        user=user, offering_id=_offering(name).id, image_id=IMAGE, billing=billing, **more
    )
    return instance


def _run(instance):
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    return instance


def _gpus(instance):
    return Allocation.objects.filter(holding_id=instance.id).count()


def _paid(user):
    wallet = Wallet.objects.get(tenant=user.tenant)
    return wallet.cash_fen


@pytest.fixture
def people(catalog):
    """A spot renter and a paying renter, each with cash; the tests play on the one RTX 4090
    node of the emulated fleet."""
    spot, paying = make_user(), make_user()
    for person in (spot, paying):
        fund(person, 500_000)
    return spot, paying


def test_spot_is_offered_at_the_seeded_price_and_billed_at_it(people):
    spot, _paying = people
    one = _offering("1× RTX 4090 24GB")
    assert one.spot_price_per_hour_fen == one.price_per_hour_fen * 40 // 100
    instance = _run(_order(spot, "1× RTX 4090 24GB", billing="spot"))
    before = _paid(spot)
    Instance.objects.filter(pk=instance.pk).update(running_since=timezone.now())
    Holding.objects.filter(pk=instance.pk).update(
        metered_since=timezone.now() - timedelta(minutes=60), metered_minutes=0
    )
    meter_tick()
    charged = before - Wallet.objects.get(tenant=spot.tenant).cash_free_fen
    # sixty minutes at the spot price, never the hourly one
    assert charged == one.spot_price_per_hour_fen
    assert charged < one.price_per_hour_fen


def test_an_offering_without_a_spot_price_refuses_spot(people):
    spot, _paying = people
    Offering.objects.filter(name="1× RTX 4090 24GB").update(spot_price_per_hour_fen=None)
    from instances.lifecycle import _CATALOG

    _CATALOG.clear()
    with pytest.raises(InvalidInput) as refused:
        _order(spot, "1× RTX 4090 24GB", billing="spot")
    assert refused.value.code == "no_spot"


def test_trial_credit_does_not_pay_for_spot(catalog):
    trial = make_user()  # a new account's trial credit only, no cash
    with pytest.raises(InsufficientBalance) as refused:
        _order(trial, "1× RTX 4090 24GB", billing="spot")
    assert "spot" in refused.value.message
    assert not Instance.objects.filter(tenant=trial.tenant).exists()


def test_fewest_holdings_are_taken_back(people):
    spot, paying = people
    big = _run(_order(spot, "4× RTX 4090 24GB", billing="spot"))
    small = [_run(_order(spot, "2× RTX 4090 24GB", billing="spot")) for _ in range(2)]
    hourly = _order(paying, "4× RTX 4090 24GB")
    assert hourly.status == "queued"
    queue_drain(product=RTX)
    # the one 4-GPU holding, not the two younger 2-GPU ones
    big.refresh_from_db()
    assert big.status == "stopping" and big.stop_reason == "preempted"
    assert [Instance.objects.get(pk=i.pk).status for i in small] == ["running", "running"]


def test_the_youngest_is_taken_back_and_the_grace_holds_the_gpus(people, cluster):
    spot, paying = people
    ordered = [_run(_order(spot, "2× RTX 4090 24GB", billing="spot")) for _ in range(4)]
    Holding.objects.filter(pk=ordered[0].pk).update(created_at=timezone.now() - timedelta(hours=3))
    youngest = ordered[-1]
    hourly = _order(paying, "2× RTX 4090 24GB")
    queue_drain(product=RTX)
    youngest.refresh_from_db()
    cost_at_notice, paid_at_notice = youngest.cost_fen, _paid(spot)
    assert youngest.status == "stopping" and youngest.stop_reason == "preempted"
    assert [Instance.objects.get(pk=i.pk).status for i in ordered[:3]] == ["running"] * 3
    deadline = Holding.objects.get(pk=youngest.pk).preempt_at
    assert deadline is not None
    assert 25 <= (deadline - timezone.now()).total_seconds() <= 30
    # billing stopped at the notice; the GPUs stay the spot instance's until its pod is gone
    assert Holding.objects.get(pk=youngest.pk).metered_since is None
    assert _gpus(youngest) == 2 and Instance.objects.get(pk=hourly.pk).status == "queued"
    # the container's notice: the deadline in its file, SIGTERM with the grace as the pod's
    # (the emulated container takes its time to exit, as a program that checkpoints would)
    cluster.kubelet.termination_s = 30
    try:
        with pytest.raises(converge.StillPending):
            converge.stop(youngest.id)
        pod = kube.read("Pod", youngest.k8s_namespace, youngest.k8s_name)
        assert pod is not None
    finally:
        cluster.kubelet.termination_s = 0.01
    assert pod["metadata"]["deletionTimestamp"]
    assert 0 < pod["metadata"]["deletionGracePeriodSeconds"] <= 30
    written = cluster.container_file(
        youngest.k8s_namespace, youngest.k8s_name, "/etc/starverse/preempt"
    )
    assert written.strip() == deadline.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    # a second paying order in the meantime takes nothing more back: the notice will free it
    queue_drain(product=RTX)
    assert Instance.objects.filter(stop_reason="preempted").count() == 1
    # the pod goes (the kubelet's grace ends): the GPUs go to the paying order
    kube.delete("Pod", youngest.k8s_namespace, youngest.k8s_name, force=True)
    assert converge_until(converge.stop, youngest.id) == "stopped"
    queue_drain(product=RTX)
    assert Instance.objects.get(pk=hourly.pk).status == "provisioning"
    youngest.refresh_from_db()
    assert youngest.cost_fen == cost_at_notice and youngest.stop_reason == "preempted"
    assert _paid(spot) == paid_at_notice  # nothing for the grace
    assert any("Taken back" in str(event.message) for event in youngest.events.all())
    assert preemption_rate(_offering("2× RTX 4090 24GB").gpu_model_id) == pytest.approx(1 / 4)


def test_hourly_holdings_are_never_taken_back(people):
    _spot, paying = people
    _run(_order(paying, "8× RTX 4090 24GB"))
    late = _order(paying, "1× RTX 4090 24GB")
    queue_drain(product=RTX)
    assert Instance.objects.get(pk=late.pk).status == "queued"
    assert not Instance.objects.filter(stop_reason="preempted").exists()


def test_paying_orders_are_never_delayed_by_spot(people):
    spot, paying = people
    _run(_order(spot, "4× RTX 4090 24GB", billing="spot"))
    _run(_order(paying, "2× RTX 4090 24GB"))
    whole = _order(paying, "8× RTX 4090 24GB")  # waits for a whole node
    assert whole.status == "queued"
    # two GPUs are free, but a paying order waits for this GPU: a spot order does not take them
    late_spot = _order(spot, "1× RTX 4090 24GB", billing="spot")
    assert late_spot.status == "queued"
    later_hourly = _order(paying, "1× RTX 4090 24GB")
    assert later_hourly.status == "queued"  # behind the whole-node order, first come
    found = positions([whole.pk, later_hourly.pk, late_spot.pk])
    assert found == {whole.pk: 1, later_hourly.pk: 2, late_spot.pk: 3}
    # once no paying order waits, a queued spot order is ahead of no paying order, however
    # early it came, and of every later spot order
    instance_terminate(instance_id=whole.pk)
    instance_terminate(instance_id=later_hourly.pk)
    assert not waits_ahead(RTX, spot=False)
    assert waits_ahead(RTX, spot=True)


def test_a_spot_cluster_is_taken_back_whole(catalog):
    owner, paying = make_user(), make_user()
    fund(paying, 500_000)
    cluster = make_cluster(owner, node_count=2, billing="spot")
    ranks = list(Instance.objects.filter(holding__gang=cluster.pk))
    assert len(ranks) == 2 and all(r.billing == "spot" for r in ranks)
    hourly = _order(paying, "1× H100 80GB SXM")
    assert hourly.status == "queued"
    queue_drain(product="NVIDIA H100 80GB HBM3")
    statuses = {Instance.objects.get(pk=r.pk).status for r in ranks}
    assert statuses == {"stopping"}  # both ranks, never one of them


def test_a_spot_order_gives_up_after_its_max_wait(people):
    spot, paying = people
    _run(_order(paying, "8× RTX 4090 24GB"))
    waiting = _order(spot, "1× RTX 4090 24GB", billing="spot", spot_max_wait_minutes=5)
    assert waiting.status == "queued"
    queue_review(now=timezone.now() + timedelta(minutes=4))
    assert Instance.objects.get(pk=waiting.pk).status == "queued"
    queue_review(now=timezone.now() + timedelta(minutes=6))
    assert Instance.objects.get(pk=waiting.pk).status == "failed"
    with pytest.raises(InvalidInput):
        _order(paying, "1× RTX 4090 24GB", spot_max_wait_minutes=5)  # hourly: no such wait


def test_the_preempted_instance_is_its_owners_alone(people, client_for):
    spot, paying = people
    victim = _run(_order(spot, "8× RTX 4090 24GB", billing="spot"))
    _order(paying, "1× RTX 4090 24GB")
    queue_drain(product=RTX)
    body = client_for(spot).get(f"/api/v1/instances/{victim.pk}").json()
    assert (body["status"], body["stop_reason"], body["billing"]) == (
        "stopping",
        "preempted",
        "spot",
    )
    assert body["price_per_hour_fen"] == _offering("8× RTX 4090 24GB").spot_price_per_hour_fen
    assert client_for(paying).get(f"/api/v1/instances/{victim.pk}").status_code == 404
    instance_terminate(instance_id=victim.pk)
    assert LedgerTransaction.objects.filter(wallet__tenant=paying.tenant).count() >= 1


def test_a_spot_job_taken_back_recovers_and_resumes_when_gpus_free(people, client_for):
    spot, paying = people
    answer = client_for(spot).post(
        "/api/v1/jobs",
        {
            "offering": _offering("1× RTX 4090 24GB").id,
            "image": IMAGE,
            "nas": False,
            "billing": "spot",
            "command": "starverse-sim-train --steps 400 --step-seconds 0.05",
        },
        format="json",
    )
    assert answer.status_code == 202, answer.json()
    job = Job.objects.get(pk=answer.json()["id"])
    rank = Instance.objects.get(job_rank__job=job)
    assert rank.billing == "spot"
    _run(rank)
    assert job_sync(job.id) == "running"
    fillers = [_run(_order(paying, f"{n}× RTX 4090 24GB")) for n in (4, 2, 1)]
    late = _order(paying, "1× RTX 4090 24GB")
    queue_drain(product=RTX)
    rank.refresh_from_db()
    assert (rank.status, rank.stop_reason) == ("stopping", "preempted")
    assert job_sync(job.id) == "recovering"
    assert converge_until(converge.stop, rank.id) == "stopped"
    rank_restart(rank.id)  # its task, once the rank stopped
    assert Instance.objects.get(pk=rank.pk).status == "queued"  # behind the paying order
    queue_drain(product=RTX)
    assert Instance.objects.get(pk=late.pk).status == "provisioning"
    assert Instance.objects.get(pk=rank.pk).status == "queued"
    assert job_sync(job.id) == "recovering"
    # a paying rental ends: the spot job's rank gets the GPU and the program runs again
    instance_terminate(instance_id=fillers[2].pk)
    assert converge_until(converge.terminate, fillers[2].pk) == "terminated"
    queue_drain(product=RTX)
    _run(Instance.objects.get(pk=rank.pk))
    assert job_sync(job.id) == "running"
    job.refresh_from_db()
    assert job.error_restarts == 0  # a preemption is not the program's failure
    assert (job.restarts, job.error_nodes) == (1, {})  # nor its node's: no review asked
    texts = [event.text for event in JobEvent.objects.filter(job=job)]
    assert any("taken back for a paying order" in text for text in texts)


def test_rent_the_price_list_and_the_instance_page_say_what_spot_is(people, client):
    spot, paying = people
    one = _offering("1× RTX 4090 24GB")
    victim = _run(_order(spot, "8× RTX 4090 24GB", billing="spot"))
    _order(paying, "1× RTX 4090 24GB")
    queue_drain(product=RTX)
    assert converge_until(converge.stop, victim.id) == "stopped"
    # visitors: the spot price and the recent preemption rate per GPU model
    home = client.get("/").content.decode()
    assert 'data-price="spot"' in home and "preemptions per rental" in home
    client.force_login(spot)
    rent = client.get("/console/rent/").content.decode()
    assert f'data-price-spot="{one.id}"' in rent
    assert 'value="spot"' in rent and "/etc/starverse/preempt" in rent
    assert f'data-spot-rate="{one.gpu_model_id}"' in rent
    assert 'name="billing" value="spot"' in client.get("/console/jobs/new/").content.decode()
    assert 'value="spot"' in client.get("/console/clusters/new/").content.decode()
    page = client.get(f"/console/instances/{victim.id}/").content.decode()
    assert 'data-stop-reason="preempted"' in page and "data-spot-notice" in page
    client.force_login(paying)
    assert client.get(f"/console/instances/{victim.id}/").status_code == 404


def test_an_operator_prices_spot_in_the_admin(catalog, client):
    staff_login(client, make_operator())
    one = _offering("1× RTX 4090 24GB")
    page = client.get(f"/admin/compute/offering/{one.pk}/change/").content.decode()
    assert 'name="spot_price_per_hour_fen"' in page
    # above the hourly price is refused by the database, whatever the form says
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        Offering.objects.filter(pk=one.pk).update(
            spot_price_per_hour_fen=one.price_per_hour_fen + 1
        )
