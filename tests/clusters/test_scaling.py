"""Cloud disks per rank at the order (all attached or none, the instance order's checks) and
scaling a stopped cluster up or down: the highest ranks terminated with their disks deleted or
kept and their cloud disks detached, new ranks added stopped and placed with the others at the
next start, whose pods and files follow the new node count (read back from the emulator)."""

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from clusters import pods
from clusters.models import Cluster
from clusters.preflight import preflight_run
from compute.models import Allocation, Offering
from devstack.kube.emulator import KubeEmulator
from fleet.services import nodes_sync_from_cluster
from instances.models import Instance, InstanceEvent, MonthlyRental
from instances.provisioning import converge
from starverse.core import kube
from storage.models import Disk
from tests.conftest import KUBE_TIMINGS
from tests.factories import (
    WHOLE_NODE,
    converge_until,
    fund,
    make_cluster,
    make_disk,
    make_user,
    read_existing,
)

IMAGE = "pytorch-2.1"


@pytest.fixture(scope="module")
def four_node_emulator() -> Iterator[KubeEmulator]:
    emulator = KubeEmulator(fleet={"h100": 4, "a100": 1}, **KUBE_TIMINGS).start()
    yield emulator
    emulator.stop()


@pytest.fixture
def fleet4(four_node_emulator, db, settings, tmp_path) -> Iterator[KubeEmulator]:
    """Four whole H100 nodes under one leaf switch and one A100, the catalog seeded."""
    four_node_emulator.reset()
    settings.MAX_RUNNING_GPUS = 64
    settings.KUBECONFIG = str(four_node_emulator.write_kubeconfig(tmp_path / "kubeconfig"))
    kube._api_client.cache_clear()
    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    yield four_node_emulator
    kube._api_client.cache_clear()


def _offering() -> Offering:
    return Offering.objects.get(name=WHOLE_NODE)


def _order(client, **body: Any):
    data = {"offering": _offering().id, "image": IMAGE, "node_count": 2, **body}
    return client.post("/api/v1/clusters", data, format="json")


def _run(cluster: Cluster) -> None:
    for rank in (
        Instance.objects.filter(cluster_rank__cluster=cluster)
        .filter(cluster_rank__index__isnull=False)
        .order_by("cluster_rank__index")
    ):
        assert converge_until(converge.provision, rank.id) == "checking"
    assert preflight_run(cluster.id) == "passed"


def _stop(client, cluster: Cluster) -> None:
    assert client.post(f"/api/v1/clusters/{cluster.id}/stop").status_code == 202
    for rank in Instance.objects.filter(cluster_rank__cluster=cluster).filter(
        cluster_rank__index__isnull=False
    ):
        assert converge_until(converge.stop, rank.id) == "stopped"


def _scale(client, cluster: Cluster, node_count: Any, **body: Any):
    return client.post(
        f"/api/v1/clusters/{cluster.id}/scale",
        {"node_count": node_count, **body},
        format="json",
    )


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


# --- cloud disks per rank at the order ------------------------------------------------------


def test_the_order_attaches_each_ranks_cloud_disks(fleet4, client_for):
    user = make_user()
    fund(user, 1_000_000)
    a, b, c = make_disk(user, "a"), make_disk(user, "b"), make_disk(user, "c")
    response = _order(client_for(user), node_count=3, disks=[[a.id, b.id], [], [c.id]])
    assert response.status_code == 202, response.content
    cluster = Cluster.objects.get(pk=response.json()["id"])
    by_rank = {
        rank.cluster_rank.index: rank.id
        for rank in Instance.objects.filter(cluster_rank__cluster=cluster).all()
    }
    attached = dict(Disk.objects.filter(pk__in=[a.id, b.id, c.id]).values_list("pk", "instance"))
    assert attached == {a.id: by_rank[0], b.id: by_rank[0], c.id: by_rank[2]}
    assert set(Disk.objects.filter(pk__in=attached).values_list("status", flat=True)) == {
        "attached"
    }


def test_disks_shorter_than_the_node_count_leave_the_rest_without(fleet4, client_for):
    user = make_user()
    fund(user, 1_000_000)
    disk = make_disk(user)
    response = _order(client_for(user), node_count=3, disks=[[disk.id]])
    assert response.status_code == 202, response.content
    rank0 = Instance.objects.get(
        cluster_rank__cluster_id=response.json()["id"], cluster_rank__index=0
    )
    assert Disk.objects.get(pk=disk.id).instance_id == rank0.id
    assert (
        Disk.objects.filter(instance__cluster_rank__cluster_id=response.json()["id"]).count() == 1
    )


def test_a_refused_disk_refuses_the_whole_order(fleet4, client_for):
    user, stranger = make_user(), make_user()
    fund(user, 1_000_000)
    mine, theirs = make_disk(user, "mine"), make_disk(stranger, "theirs")
    busy = make_disk(user, "busy")
    client = client_for(user)
    first = _order(client, disks=[[busy.id]])
    assert first.status_code == 202

    foreign = _order(client, disks=[[mine.id], [theirs.id]])
    twice = _order(client, disks=[[mine.id], [mine.id]])
    taken = _order(client, disks=[[mine.id], [busy.id]])
    too_many = _order(client, disks=[[], [], [mine.id]])

    assert (foreign.status_code, foreign.json()["code"]) == (404, "disk_not_found")
    assert (twice.status_code, twice.json()["code"]) == (400, "duplicate_disk")
    assert (taken.status_code, taken.json()["code"]) == (409, "disk_attached")
    assert (too_many.status_code, too_many.json()["code"]) == (400, "too_many_disk_lists")
    # nothing of the refused orders stayed: one cluster, and `mine` attached nowhere
    assert Cluster.objects.filter(tenant=user.tenant).count() == 1
    assert Disk.objects.get(pk=mine.id).instance_id is None
    assert Disk.objects.get(pk=theirs.id).instance_id is None


def test_the_disks_are_part_of_the_idempotent_request(fleet4, client_for):
    user = make_user()
    fund(user, 1_000_000)
    a, b = make_disk(user, "a"), make_disk(user, "b")
    client = client_for(user)
    key = {"HTTP_IDEMPOTENCY_KEY": "cluster-disks-1"}
    body = {"offering": _offering().id, "image": IMAGE, "node_count": 2, "disks": [[a.id]]}
    first = client.post("/api/v1/clusters", body, format="json", **key)
    again = client.post("/api/v1/clusters", body, format="json", **key)
    other = client.post("/api/v1/clusters", {**body, "disks": [[b.id]]}, format="json", **key)
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    assert other.status_code == 409
    assert Disk.objects.get(pk=b.id).instance_id is None


# --- scaling a stopped cluster --------------------------------------------------------------


def test_scale_up_then_start_gives_every_rank_the_new_layout(fleet4, client_for):
    user = make_user()
    client = client_for(user)
    cluster = make_cluster(user, node_count=2, template="deepspeed")
    _run(cluster)
    _stop(client, cluster)
    first_key = Cluster.objects.get(pk=cluster.pk).ssh_private_key

    response = _scale(client, cluster, 3)
    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["node_count"], body["status"]) == (3, "stopped")
    assert [(r["rank"], r["status"], r["node"]) for r in body["ranks"]] == [
        (0, "stopped", None),
        (1, "stopped", None),
        (2, "stopped", None),
    ]
    assert body["message"].startswith("Scaled up from 2 to 3 nodes")
    added = Instance.objects.get(cluster_rank__cluster=cluster, cluster_rank__index=2)
    head = Instance.objects.get(cluster_rank__cluster=cluster, cluster_rank__index=0)
    assert (added.offering_id, added.image_id, added.billing) == (
        head.offering_id,
        head.image_id,
        head.billing,
    )
    assert added.ssh_key_ids == head.ssh_key_ids and added.node_id is None

    fund(user, 1_000_000)
    started = client.post(f"/api/v1/clusters/{cluster.id}/start").json()
    assert started["status"] == "provisioning"
    assert len({r["node"] for r in started["ranks"]}) == 3
    assert Allocation.objects.filter(holding__instance__cluster_rank__cluster=cluster).count() == 24
    cluster.refresh_from_db()
    _run(cluster)

    rows = list(
        Instance.objects.filter(cluster_rank__cluster=cluster).order_by("cluster_rank__index")
    )
    namespace, dns = rows[0].k8s_namespace, pods.cluster_dns(cluster.id)
    hosts = [f"{dns}-{i}.{dns}" for i in range(3)]
    for row in rows:
        env = _env(read_existing("Pod", namespace, row.k8s_name))
        assert (env["NNODES"], env["PET_NNODES"], env["WORLD_SIZE"]) == ("3", "3", "24")
        assert env["NODE_RANK"] == str(row.cluster_rank.index)
    files = read_existing("ConfigMap", namespace, f"{dns}-files")["data"]
    assert files["hostfile"].splitlines() == [f"{host} slots=8" for host in hosts]
    assert "--nnodes=3 --nproc-per-node=8" in files["launch-torchrun.sh"]
    # the shared Secret's known_hosts lists the new rank too; the cluster's key stays
    secret = read_existing("Secret", namespace, f"{dns}-ssh")
    import base64

    known = base64.b64decode(secret["data"]["known_hosts"]).decode()
    assert all(host in known for host in hosts)
    assert Cluster.objects.get(pk=cluster.pk).ssh_private_key == first_key
    assert client.get(f"/api/v1/clusters/{cluster.id}").json()["status"] == "running"


def test_scale_down_terminates_the_highest_ranks_and_detaches_their_cloud_disks(fleet4, client_for):
    user = make_user()
    fund(user, 1_000_000)
    client = client_for(user)
    disk = make_disk(user, "data")
    cluster = Cluster.objects.get(
        pk=_order(client, node_count=3, template="deepspeed", disks=[[], [], [disk.id]]).json()[
            "id"
        ]
    )
    _run(cluster)
    _stop(client, cluster)
    gone = Instance.objects.get(cluster_rank__cluster=cluster, cluster_rank__index=2)

    response = _scale(client, cluster, 2)
    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["node_count"], [r["rank"] for r in body["ranks"]]) == (2, [0, 1])
    assert "ranks 2 terminated, their own disks deleted" in body["message"]
    assert "cloud disks detached, data intact" in body["message"]
    assert converge_until(converge.terminate, gone.id) == "terminated"
    gone.refresh_from_db()
    assert (gone.status, gone.cluster_rank.index, gone.cluster_rank.cluster_id) == (
        "terminated",
        None,
        cluster.id,
    )
    assert Disk.objects.get(pk=disk.id).instance_id is None
    assert Disk.objects.get(pk=disk.id).status == "available"
    # its own disk is gone from the cluster, the shared objects stay for the ranks left
    namespace, dns = gone.k8s_namespace, pods.cluster_dns(cluster.id)
    assert kube.read("PersistentVolumeClaim", namespace, f"{gone.k8s_name}-disk") is None
    assert kube.read("ConfigMap", namespace, f"{dns}-files") is not None

    body = client.get(f"/api/v1/clusters/{cluster.id}").json()
    assert (body["status"], body["node_count"]) == ("stopped", 2)
    events = client.get(f"/api/v1/clusters/{cluster.id}/events").json()["results"]
    assert any(e["rank"] is None for e in events)  # the removed rank's history stays
    assert any(e["rank"] == 0 and e["message"].startswith("Scaled down") for e in events)

    # and started again, two ranks with the two-node layout
    assert client.post(f"/api/v1/clusters/{cluster.id}/start").status_code == 202
    cluster.refresh_from_db()
    _run(cluster)
    files = read_existing("ConfigMap", namespace, f"{dns}-files")["data"]
    assert len(files["hostfile"].splitlines()) == 2
    for row in Instance.objects.filter(cluster_rank__cluster=cluster).filter(
        cluster_rank__index__isnull=False
    ):
        assert _env(read_existing("Pod", namespace, row.k8s_name))["NNODES"] == "2"


def test_scale_down_can_keep_the_removed_ranks_disks(fleet4, client_for):
    user = make_user()
    client = client_for(user)
    cluster = make_cluster(user, node_count=3)
    _run(cluster)
    _stop(client, cluster)
    gone = Instance.objects.get(cluster_rank__cluster=cluster, cluster_rank__index=2)
    response = _scale(client, cluster, 2, keep_disks=True)
    assert response.status_code == 202, response.content
    assert "own disks kept as cloud disks" in response.json()["message"]
    assert converge_until(converge.terminate, gone.id) == "terminated"
    assert Disk.objects.filter(tenant=user.tenant).count() == 1  # its own disk, kept


def test_scaling_is_refused_unless_stopped_and_within_bounds(fleet4, client_for, settings):
    user = make_user()
    client = client_for(user)
    cluster = make_cluster(user, node_count=2)
    running = _scale(client, cluster, 3)
    assert (running.status_code, running.json()["code"]) == (409, "wrong_state")
    assert "Only a stopped cluster can be scaled" in running.json()["detail"]
    _run(cluster)
    _stop(client, cluster)
    settings.CLUSTER_MAX_NODES = 3
    for count in (1, 0, 4, 500):
        refused = _scale(client, cluster, count)
        assert (refused.status_code, refused.json()["code"]) == (400, "invalid_node_count")
    settings.CLUSTER_MAX_NODES = 128
    bigger = _scale(client, cluster, 5)  # the fleet has four H100 nodes
    assert (bigger.status_code, bigger.json()["code"]) == (400, "too_many_nodes")
    assert _scale(client, cluster, "three").status_code == 400
    same = _scale(client, cluster, 2)
    assert (same.status_code, same.json()["message"]) == (202, None)
    assert Instance.objects.filter(cluster_rank__cluster=cluster).count() == 2
    assert Cluster.objects.get(pk=cluster.pk).node_count == 2


def test_another_tenants_cluster_is_not_found(fleet4, client_for):
    owner = make_user()
    cluster = make_cluster(owner, node_count=2)
    _run(cluster)
    _stop(client_for(owner), cluster)
    response = _scale(client_for(make_user()), cluster, 3)
    assert response.status_code == 404
    assert Cluster.objects.get(pk=cluster.pk).node_count == 2


def test_megatron_degrees_must_still_divide_the_new_world_size(fleet4, client_for):
    user = make_user()
    client = client_for(user)
    cluster = make_cluster(
        user, node_count=2, template="megatron", parallelism={"tensor": 8, "pipeline": 2}
    )
    _run(cluster)
    _stop(client, cluster)
    refused = _scale(client, cluster, 3)  # 24 GPUs: tensor 8 × pipeline 2 does not divide
    assert (refused.status_code, refused.json()["code"]) == (400, "invalid_parallelism")
    assert _scale(client, cluster, 4).status_code == 202


def test_a_monthly_cluster_is_not_scaled_down_within_its_paid_month(fleet4, client_for):
    user = make_user()
    fund(user, 100_000_000)
    client = client_for(user)
    cluster = make_cluster(user, node_count=3, billing="monthly")
    _run(cluster)
    _stop(client, cluster)
    refused = _scale(client, cluster, 2)
    assert (refused.status_code, refused.json()["code"]) == (409, "paid_period")
    assert (
        Instance.objects.get(cluster_rank__cluster=cluster, cluster_rank__index=2).status
        == "stopped"
    )
    # once the month is over it may shrink
    MonthlyRental.objects.filter(instance__cluster_rank__cluster=cluster).update(
        paid_until=timezone.now() - timedelta(days=1)
    )
    assert _scale(client, cluster, 2).status_code == 202


def test_the_console_scales_a_stopped_cluster(fleet4, client):
    user = make_user()
    client.force_login(user)
    cluster = make_cluster(user, node_count=2)
    page = client.get(f"/console/clusters/{cluster.id}/").content.decode()
    assert f"/console/clusters/{cluster.id}/scale/" not in page  # not while it runs
    refused = client.post(f"/console/clusters/{cluster.id}/scale/", {"node_count": 3}, follow=True)
    assert "Only a stopped cluster can be scaled" in refused.content.decode()
    _run(cluster)
    for rank in Instance.objects.filter(cluster_rank__cluster=cluster).all():
        rank.refresh_from_db()
    from clusters.services import cluster_stop

    cluster_stop(cluster=cluster)
    for rank in Instance.objects.filter(cluster_rank__cluster=cluster).all():
        assert converge_until(converge.stop, rank.id) == "stopped"
    page = client.get(f"/console/clusters/{cluster.id}/").content.decode()
    assert f"/console/clusters/{cluster.id}/scale/" in page
    done = client.post(f"/console/clusters/{cluster.id}/scale/", {"node_count": 3}, follow=True)
    assert done.status_code == 200
    assert "now has 3 nodes" in done.content.decode()
    assert Cluster.objects.get(pk=cluster.pk).node_count == 3
    assert "Rank 2" in done.content.decode()
    stranger = make_user()
    client.force_login(stranger)
    assert client.post(f"/console/clusters/{cluster.id}/scale/", {"node_count": 2}).status_code == (
        404
    )
    assert InstanceEvent.objects.filter(instance__cluster_rank__cluster=cluster).exists()
