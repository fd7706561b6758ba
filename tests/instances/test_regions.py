"""Several clusters (regions): each region is its own kube emulator with its own kubeconfig. An
order for a region places there and provisions through that cluster's API server; "any" goes
where there is room; a disk attaches only in its region; the periodic sync, the regions API and
the node agents' registration are per region."""

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from devstack.kube import KubeEmulator
from fleet.models import DEFAULT_REGION, Node, Region
from fleet.selectors import region_target
from fleet.services import region_register
from fleet.tasks import sync_nodes_from_cluster
from instances.lifecycle import instance_order, instance_terminate
from instances.models import Instance
from instances.provisioning import converge
from instances.volumes import disk_attach
from nodeagent.credentials import NodeCredentials
from starverse.core import kube
from starverse.core.errors import Conflict, InvalidInput
from storage.disks import disk_create
from tests.conftest import KUBE_TIMINGS
from tests.factories import converge_until, fund, make_user

REGION_B = "cn-north-1"
# The second cluster: one 8× H100 node, named apart from the first cluster's nodes.
FLEET_B = {"h100": 1}


@pytest.fixture(scope="module")
def emulator_b() -> Iterator[KubeEmulator]:
    emulator = KubeEmulator(fleet=FLEET_B, node_prefix="b-", **KUBE_TIMINGS).start()
    yield emulator
    emulator.stop()


@pytest.fixture
def two_regions(
    catalog: dict[str, Any], emulator_b: KubeEmulator, tmp_path: Path
) -> dict[str, Any]:
    """The session's emulator as the default region and a second one as REGION_B, both
    synced: catalog's 2×8 H100, 1×8 A100 and 1×8 RTX 4090 in one, 1×8 H100 (b-…) in the
    other."""
    emulator_b.reset()
    kubeconfig_b = str(emulator_b.write_kubeconfig(tmp_path / "kubeconfig-b"))
    region_register(name=REGION_B, display_name="华北 1", kubeconfig=kubeconfig_b)
    sync_nodes_from_cluster()
    return {**catalog, "b": emulator_b}


def _in_region(region: str) -> Any:
    return kube.cluster(region_target(Region.objects.get(pk=region)))


def _node_name(instance: Instance) -> str | None:
    return instance.node.name if instance.node is not None else None


def _user(fen: int = 500_000) -> Any:
    user = make_user()
    fund(user, fen)
    return user


def test_the_sync_mirrors_each_cluster_into_its_region(two_regions):
    by_region = dict(Node.objects.values_list("name", "region_id"))

    assert by_region == {
        "gpu-h100-0": DEFAULT_REGION,
        "gpu-h100-1": DEFAULT_REGION,
        "gpu-a100-0": DEFAULT_REGION,
        "gpu-rtx4090-0": DEFAULT_REGION,
        "b-gpu-h100-0": REGION_B,
    }
    assert Node.objects.filter(in_cluster=True).count() == 5


def test_a_node_gone_from_one_cluster_leaves_the_other_regions_nodes_alone(two_regions):
    with _in_region(REGION_B):
        kube.core().delete_node("b-gpu-h100-0")

    sync_nodes_from_cluster()

    gone = Node.objects.get(name="b-gpu-h100-0")
    assert (gone.region_id, gone.in_cluster) == (REGION_B, False)
    assert Node.objects.filter(region_id=DEFAULT_REGION, in_cluster=True).count() == 4


def test_an_order_for_a_region_provisions_through_that_clusters_api_server(two_regions):
    user = _user()
    instance, _ = instance_order(
        user=user,
        offering_id=two_regions["h100x1"].id,
        image_id="pytorch-2.1",
        region=REGION_B,
    )

    assert _node_name(instance) == "b-gpu-h100-0"
    assert instance.region_id == REGION_B
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    with _in_region(REGION_B):
        pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    with _in_region(DEFAULT_REGION):
        elsewhere = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    assert pod is not None and pod["spec"]["nodeName"] == "b-gpu-h100-0"
    assert elsewhere is None

    instance_terminate(instance_id=instance.id)
    assert converge_until(converge.terminate, instance.id) == "terminated"
    with _in_region(REGION_B):
        assert kube.read("Pod", instance.k8s_namespace, instance.k8s_name) is None


def test_any_region_goes_where_there_is_room(two_regions):
    whole_node = two_regions["h100_node"].id
    placed = [
        instance_order(user=_user(), offering_id=whole_node, image_id="pytorch-2.1")[0]
        for _ in range(3)
    ]

    # the two whole H100 nodes of the default region and the one of REGION_B
    assert sorted((i.region_id, _node_name(i)) for i in placed) == [
        (REGION_B, "b-gpu-h100-0"),
        (DEFAULT_REGION, "gpu-h100-0"),
        (DEFAULT_REGION, "gpu-h100-1"),
    ]
    fourth, _ = instance_order(user=_user(), offering_id=whole_node, image_id="pytorch-2.1")
    assert (fourth.status, fourth.region_id) == ("queued", None)


def test_a_region_without_room_queues_the_order_there(two_regions):
    a100 = two_regions["a100_node"].id
    instance, _ = instance_order(
        user=_user(), offering_id=a100, image_id="pytorch-2.1", region=REGION_B
    )

    assert (instance.status, instance.region_id, instance.node_id) == ("queued", REGION_B, None)


def test_an_unknown_region_is_refused_with_the_list(two_regions):
    user = _user()
    with pytest.raises(InvalidInput) as refused:
        instance_order(
            user=user,
            offering_id=two_regions["h100x1"].id,
            image_id="pytorch-2.1",
            region="mars-1",
        )

    assert refused.value.code == "unknown_region"
    assert str(refused.value.message) == (
        f"Unknown region mars-1. The regions are: {REGION_B}, {DEFAULT_REGION}."
    )
    assert not Instance.objects.filter(tenant_id=user.tenant_id).exists()


def test_a_disk_of_one_region_is_refused_on_an_instance_of_another(two_regions):
    user = _user()
    disk = disk_create(user=user, name="ckpt", size_gb=100, region=DEFAULT_REGION)
    instance, _ = instance_order(
        user=user,
        offering_id=two_regions["h100x1"].id,
        image_id="pytorch-2.1",
        region=REGION_B,
    )
    Instance.objects.filter(pk=instance.pk).update(status="stopped")
    instance.refresh_from_db()

    with pytest.raises(Conflict) as refused:
        disk_attach(instance=instance, disk_id=disk.id)

    assert refused.value.code == "wrong_region"
    assert str(refused.value.message) == (
        f"Disk ckpt is in region {DEFAULT_REGION} and attaches only to instances in that "
        f"region; this instance is in {REGION_B}."
    )
    disk.refresh_from_db()
    assert (disk.instance_id, disk.status) == (None, "creating")


def test_an_order_for_any_region_with_a_disk_goes_to_the_disks_region(two_regions):
    user = _user()
    disk = disk_create(user=user, name="data", size_gb=100, region=REGION_B)

    instance, _ = instance_order(
        user=user, offering_id=two_regions["h100x1"].id, image_id="pytorch-2.1", disks=[disk.id]
    )

    assert (instance.region_id, _node_name(instance)) == (REGION_B, "b-gpu-h100-0")
    assert converge_until(converge.provision, instance.id) == "running"
    with _in_region(REGION_B):
        claim = kube.read("PersistentVolumeClaim", disk.k8s_namespace, disk.k8s_name)
    assert claim is not None


def test_the_api_lists_regions_and_takes_a_region(two_regions, client_for):
    api = client_for(_user())

    regions = api.get("/api/v1/regions").json()["results"]
    offerings = {o["id"]: o for o in api.get("/api/v1/offerings").json()["results"]}
    ordered = api.post(
        "/api/v1/instances",
        {"offering": two_regions["h100x1"].id, "image": "pytorch-2.1", "region": REGION_B},
        format="json",
    )
    unknown = api.post(
        "/api/v1/instances",
        {"offering": two_regions["h100x1"].id, "image": "pytorch-2.1", "region": "nowhere"},
        format="json",
    )

    assert regions == [
        {
            "name": REGION_B,
            "display_name": "华北 1",
            "gpu_models": [{"id": "h100-80g", "name": "H100 80GB SXM", "gpus": 8, "free": 8}],
        },
        {
            "name": DEFAULT_REGION,
            "display_name": "Default",
            "gpu_models": [
                {"id": "a100-80g", "name": "A100 80GB SXM", "gpus": 8, "free": 8},
                {"id": "h100-80g", "name": "H100 80GB SXM", "gpus": 16, "free": 16},
                {"id": "rtx4090", "name": "RTX 4090 24GB", "gpus": 8, "free": 8},
            ],
        },
    ]
    assert offerings[two_regions["h100x1"].id]["regions"] == [REGION_B, DEFAULT_REGION]
    assert offerings[two_regions["a100_node"].id]["regions"] == [DEFAULT_REGION]
    assert ordered.status_code == 202
    assert ordered.json()["region"] == REGION_B
    assert ordered.json()["node"] == "b-gpu-h100-0"
    assert unknown.status_code == 400
    assert unknown.json()["code"] == "unknown_region"
    assert api.get("/api/v1/regions").json()["results"][0]["gpu_models"][0]["free"] == 7


def test_a_node_agent_of_region_b_registers_its_node_to_b(live_server, settings, tmp_path):
    settings.NODE_BOOTSTRAP_TOKEN = "boot-regions"
    region_register(name=REGION_B, display_name="华北 1")
    bootstrap = tmp_path / "bootstrap"
    bootstrap.write_text("boot-regions\n")
    spec = {"gpu_product": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "gpu_memory_mb": 81559}

    def agent(node: str, region: str) -> NodeCredentials:
        return NodeCredentials(
            live_server.url,
            node,
            tmp_path / f"{node}.token",
            bootstrap,
            lambda: dict(spec),
            timeout=5,
            region=region,
        )

    token = agent("b-gpu-h100-7", REGION_B).token()

    node = Node.objects.get(name="b-gpu-h100-7")
    assert token.startswith("svn_")
    assert node.region_id == REGION_B
    agent("gpu-h100-7", "").token()
    assert Node.objects.get(name="gpu-h100-7").region_id == DEFAULT_REGION


def test_a_registration_naming_another_region_than_the_nodes_is_refused(two_regions, api, settings):
    settings.NODE_BOOTSTRAP_TOKEN = "boot-regions"
    body = {
        "name": "b-gpu-h100-0",
        "bootstrap_token": "boot-regions",
        "gpu_product": "NVIDIA H100 80GB HBM3",
        "gpu_count": 8,
        "gpu_memory_mb": 81559,
    }

    wrong = api.post("/api/v1/nodes/register", body, format="json")
    right = api.post("/api/v1/nodes/register", {**body, "region": REGION_B}, format="json")

    assert (wrong.status_code, wrong.json()["code"]) == (409, "wrong_region")
    assert right.status_code == 201


def test_fleet_sync_command_syncs_the_named_region(two_regions, tmp_path):
    Node.objects.filter(region_id=REGION_B).delete()

    folder = tmp_path / "agents"
    call_command("fleet_sync", "--region", REGION_B, "--agent-tokens", str(folder))

    assert list(Node.objects.filter(region_id=REGION_B).values_list("name", flat=True)) == [
        "b-gpu-h100-0"
    ]
    assert sorted(p.name for p in folder.iterdir()) == ["b-gpu-h100-0.token"]


def test_the_rent_page_offers_the_regions_and_the_instance_page_shows_its_own(two_regions, client):
    user = _user()
    client.force_login(user)
    page = client.get("/console/rent/").content.decode()
    token = re.search(r'name="token" value="([^"]+)"', page)

    ordered = client.post(
        "/console/rent/",
        {
            "offering": two_regions["h100x1"].id,
            "image": two_regions["image"].id,
            "billing": "hourly",
            "region": REGION_B,
            "token": token.group(1) if token else "",
        },
    )

    assert '<option value="cn-north-1">华北 1</option>' in page
    instance = Instance.objects.get(tenant_id=user.tenant_id)
    assert ordered.status_code == 302
    assert (instance.region_id, _node_name(instance)) == (REGION_B, "b-gpu-h100-0")
    detail = client.get(f"/console/instances/{instance.id}/").content.decode()
    assert '<dd data-field="region">华北 1</dd>' in detail


def test_the_disks_page_offers_only_instances_of_the_disks_region(two_regions, client):
    user = _user()
    client.force_login(user)
    disk_create(user=user, name="ckpt", size_gb=100, region=DEFAULT_REGION)
    for region in (DEFAULT_REGION, REGION_B):
        instance, _ = instance_order(
            user=user,
            offering_id=two_regions["h100x1"].id,
            image_id="pytorch-2.1",
            name=f"in-{region}",
            region=region,
        )
        Instance.objects.filter(pk=instance.pk).update(status="stopped")

    page = client.get("/console/disks/").content.decode()

    assert "Region: Default" in page
    assert "in-default (Stopped)" in page
    assert "in-cn-north-1" not in page
    assert "A disk lives in one region and attaches only to instances in that region." in page


def test_a_cluster_order_keeps_every_rank_in_its_region(two_regions, client_for):
    """POST /clusters takes `region` like an instance order: every rank is kept to it (queued
    there when it has too few whole nodes, never spread into another region); an unknown one
    is a 400 that lists the regions."""
    from clusters.models import Cluster

    user = _user(2_000_000)
    api = client_for(user)
    offering = two_regions["h100_node"]

    def order(region: str, key: str) -> Any:
        return api.post(
            "/api/v1/clusters",
            {"offering": offering.id, "node_count": 2, "image": "pytorch-2.1", "region": region},
            format="json",
            HTTP_IDEMPOTENCY_KEY=key,
        )

    unknown = order("mars-1", "c0")
    assert (unknown.status_code, unknown.json()["code"]) == (400, "unknown_region")
    assert REGION_B in unknown.json()["detail"] and not Cluster.objects.exists()

    # region B has one H100 node: a 2-node cluster waits there, not on the default's two free
    in_b = order(REGION_B, "c1")
    assert in_b.status_code == 202, in_b.content
    assert in_b.json()["status"] == "queued" and in_b.json()["region"] == REGION_B
    ranks = Instance.objects.filter(cluster_rank__cluster_id=in_b.json()["id"])
    assert {r.region_id for r in ranks} == {REGION_B} and not any(r.node_id for r in ranks)

    in_default = order(DEFAULT_REGION, "c2")
    assert in_default.json()["region"] == DEFAULT_REGION
    assert {r["node"] for r in in_default.json()["ranks"]} == {"gpu-h100-0", "gpu-h100-1"}
