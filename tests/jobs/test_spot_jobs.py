"""Spot jobs: one says how long it waits for GPUs (spot_max_wait_minutes), then fails at no
cost; a preempted one is billed to the minute it was taken back, nothing while recovering, and
again from its restart; a multi-node one is taken back whole by a paying cluster order."""

from datetime import timedelta

from django.utils import timezone

from billing.models import LedgerTransaction, Wallet
from billing.services import minute_charge_fen
from compute.metering import meter_tick
from compute.models import Holding, Offering
from instances.lifecycle import instance_order, instance_terminate, queue_drain, queue_review
from instances.models import Instance
from instances.provisioning import converge
from jobs.models import Job, JobEvent
from jobs.recovery import rank_restart
from jobs.services import job_sync
from tests.factories import WHOLE_NODE, converge_until, fund, make_cluster, make_user

IMAGE = "pytorch-2.1"
RTX = "NVIDIA GeForce RTX 4090"
H100 = "NVIDIA H100 80GB HBM3"
TRAIN = "starverse-sim-train --steps 400 --step-seconds 0.05"


def _offering(name):
    return Offering.objects.get(name=name)


def _submit(client, offering, **body):
    data = {"offering": _offering(offering).id, "image": IMAGE, "nas": False, "command": TRAIN}
    return client.post("/api/v1/jobs", {**data, **body}, format="json")


def _job(client, offering, **body):
    answer = _submit(client, offering, **body)
    assert answer.status_code == 202, answer.json()
    return Job.objects.get(pk=answer.json()["id"])


def _ledger(user):
    wallet = Wallet.objects.get(tenant=user.tenant)
    return wallet.total_fen, LedgerTransaction.objects.filter(wallet=wallet).count()


def _cash(user):
    return Wallet.objects.get(tenant=user.tenant).cash_fen


def _people():
    spot, paying = make_user(), make_user()
    for person in (spot, paying):
        fund(person, 5_000_000)
    return spot, paying


def _rank(job):
    return Instance.objects.get(job_rank__job=job)


def test_a_spot_job_gives_up_after_its_max_wait_at_no_cost(catalog, client_for):
    spot, paying = _people()
    instance_order(user=paying, offering_id=_offering("8× RTX 4090 24GB").id, image_id=IMAGE)
    before = _ledger(spot)
    job = _job(client_for(spot), "1× RTX 4090 24GB", billing="spot", spot_max_wait_minutes=5)
    assert _rank(job).status == "queued"
    queue_review(now=timezone.now() + timedelta(minutes=4))
    assert job_sync(job.id) == "queued"
    queue_review(now=timezone.now() + timedelta(minutes=6))
    assert _rank(job).status == "failed"
    assert job_sync(job.id) == "failed"
    said = JobEvent.objects.filter(job=job, status="failed").get()
    assert "nothing was charged" in said.text
    assert _ledger(spot) == before


def test_only_a_spot_job_waits_so(catalog, client_for):
    user, _paying = _people()
    client = client_for(user)
    answer = _submit(client, "1× RTX 4090 24GB", spot_max_wait_minutes=5)  # hourly
    assert (answer.status_code, answer.json()["code"]) == (400, "invalid_spot_max_wait")
    answer = _submit(client, "1× RTX 4090 24GB", billing="spot", spot_max_wait_minutes=10081)
    assert (answer.status_code, answer.json()["code"]) == (400, "invalid_spot_max_wait")
    assert not Job.objects.exists() and not Instance.objects.exists()


def test_a_preempted_spot_job_is_billed_until_taken_back_and_again_from_its_restart(
    catalog, client_for
):
    spot, paying = _people()
    price = _offering("1× RTX 4090 24GB").spot_price_per_hour_fen
    job = _job(client_for(spot), "1× RTX 4090 24GB", billing="spot")
    rank = _rank(job)
    assert converge_until(converge.provision, rank.id) == "running"
    assert job_sync(job.id) == "running"
    start = _cash(spot)
    # 29½ minutes run when it is taken back: the minute in progress counts, 30 are billed
    Holding.objects.filter(pk=rank.pk).update(
        metered_since=timezone.now() - timedelta(minutes=29, seconds=30), metered_minutes=0
    )
    fillers = [
        instance_order(
            user=paying, offering_id=_offering(f"{n}× RTX 4090 24GB").id, image_id=IMAGE
        )[0]
        for n in (4, 2, 1)
    ]
    late, _created = instance_order(
        user=paying, offering_id=_offering("1× RTX 4090 24GB").id, image_id=IMAGE
    )
    queue_drain(product=RTX)
    assert (Instance.objects.get(pk=rank.pk).stop_reason, job_sync(job.id)) == (
        "preempted",
        "recovering",
    )
    thirty = sum(minute_charge_fen(price, m) for m in range(1, 31))
    assert thirty == price // 2 and start - _cash(spot) == thirty
    # recovering: not metered, however long it waits
    assert converge_until(converge.stop, rank.id) == "stopped"
    rank_restart(rank.id)
    assert Holding.objects.get(pk=rank.pk).metered_since is None
    meter_tick(now=timezone.now() + timedelta(hours=2))
    assert start - _cash(spot) == thirty
    # a paying rental ends: the rank runs again and is billed again, at the spot price
    instance_terminate(instance_id=fillers[2].pk)
    assert converge_until(converge.terminate, fillers[2].pk) == "terminated"
    queue_drain(product=RTX)
    assert Instance.objects.get(pk=late.pk).status == "provisioning"
    instance_terminate(instance_id=late.pk)
    assert converge_until(converge.terminate, late.pk) == "terminated"
    queue_drain(product=RTX)
    assert converge_until(converge.provision, rank.id) == "running"
    assert job_sync(job.id) == "running"
    Holding.objects.filter(pk=rank.pk).update(
        metered_since=timezone.now() - timedelta(minutes=60), metered_minutes=0
    )
    meter_tick()
    assert start - _cash(spot) == thirty + price
    assert Instance.objects.get(pk=rank.pk).cost_fen == thirty + price


def test_a_multi_node_spot_job_is_taken_back_whole_by_a_paying_cluster(catalog, client_for):
    spot, paying = _people()
    job = _job(client_for(spot), WHOLE_NODE, billing="spot", node_count=2, template="none")
    ranks = list(Instance.objects.filter(job_rank__job=job))
    assert len(ranks) == 2 and {r.status for r in ranks} == {"provisioning"}
    cluster = make_cluster(paying, node_count=2)
    queue_drain(product=H100)
    assert {Instance.objects.get(pk=r.pk).status for r in ranks} == {"stopping"}
    assert {Instance.objects.get(pk=r.pk).stop_reason for r in ranks} == {"preempted"}
    assert job_sync(job.id) == "recovering"
    for rank in ranks:
        assert converge_until(converge.stop, rank.id) == "stopped"
    queue_drain(product=H100)
    placed = {i.status for i in Instance.objects.filter(holding__gang=cluster.pk)}
    assert placed == {"provisioning"}
