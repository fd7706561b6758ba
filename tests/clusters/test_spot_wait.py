"""A spot cluster says how long it waits for nodes (spot_max_wait_minutes, as a spot instance
does): past it every rank fails, at no cost, saying what to do; only a spot order waits so."""

from datetime import timedelta

from django.utils import timezone

from billing.models import LedgerTransaction, Wallet
from clusters.models import Cluster
from compute.models import Holding, Offering
from instances.lifecycle import instance_order, queue_review
from instances.models import Instance, InstanceEvent
from tests.factories import WHOLE_NODE, fund, make_user

IMAGE = "pytorch-2.1"


def _post(client, **body):
    offering = Offering.objects.get(name=WHOLE_NODE)
    data = {"offering": offering.id, "image": IMAGE, "node_count": 2, **body}
    return client.post("/api/v1/clusters", data, format="json")


def _ledger(user):
    wallet = Wallet.objects.get(tenant=user.tenant)
    return wallet.total_fen, LedgerTransaction.objects.filter(wallet=wallet).count()


def test_a_spot_cluster_gives_up_after_its_max_wait_at_no_cost(catalog, client_for):
    owner, paying = make_user(), make_user()
    for person in (owner, paying):
        fund(person, 5_000_000)
    # an hourly rental holds one of the two H100 nodes: a 2-node cluster cannot be placed
    instance_order(
        user=paying, offering_id=Offering.objects.get(name=WHOLE_NODE).id, image_id=IMAGE
    )
    before = _ledger(owner)
    answer = _post(client_for(owner), billing="spot", spot_max_wait_minutes=5)
    assert answer.status_code == 202, answer.json()
    cluster = Cluster.objects.get(pk=answer.json()["id"])
    ranks = list(Instance.objects.filter(holding__gang=cluster.pk).order_by("pk"))
    assert {rank.status for rank in ranks} == {"queued"}
    until = set(Holding.objects.filter(gang=cluster.pk).values_list("wait_until", flat=True))
    assert len(until) == 1 and None not in until
    queue_review(now=timezone.now() + timedelta(minutes=4))
    assert {Instance.objects.get(pk=r.pk).status for r in ranks} == {"queued"}
    queue_review(now=timezone.now() + timedelta(minutes=6))
    assert {Instance.objects.get(pk=r.pk).status for r in ranks} == {"failed"}
    assert client_for(owner).get(f"/api/v1/clusters/{cluster.pk}").json()["status"] == "failed"
    for rank in ranks:
        said = InstanceEvent.objects.filter(instance_id=rank.pk, status="failed").get()
        assert "nothing was charged" in str(said.message)
    assert _ledger(owner) == before


def test_only_a_spot_cluster_waits_so(catalog, client_for):
    user = make_user()
    fund(user, 5_000_000)
    client = client_for(user)
    before = _ledger(user)
    answer = _post(client, spot_max_wait_minutes=5)  # hourly
    assert (answer.status_code, answer.json()["code"]) == (400, "invalid_spot_max_wait")
    answer = _post(client, billing="spot", spot_max_wait_minutes=0)
    assert (answer.status_code, answer.json()["code"]) == (400, "invalid_spot_max_wait")
    assert not Cluster.objects.exists() and not Instance.objects.exists()
    assert _ledger(user) == before
