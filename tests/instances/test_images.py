"""Images already on the nodes: the node sync stores what each node holds, placement prefers
those nodes only among equally good ones, the pre-pull DaemonSets follow the catalogue, and
the Rent page and the offerings API say which first starts are warm."""

from typing import Any

import pytest
from django.db import transaction
from django.urls import reverse

from compute.models import Image, Offering
from compute.placement import choose
from fleet.models import Node, NodeImage
from fleet.services import nodes_sync_from_cluster
from instances.lifecycle import instance_order, instance_terminate, queue_drain
from instances.models import Instance
from instances.provisioning import converge, prepull
from starverse.core import kube
from tests.devstack import wait_for
from tests.factories import converge_until, fund, make_user

PYTORCH = "starverse/pytorch:2.1-cuda12.1"
NORMALIZED = "docker.io/starverse/pytorch:2.1-cuda12.1"
H100_NODES = ["gpu-h100-0", "gpu-h100-1"]


def warm(cluster: Any, node: str, reference: str = PYTORCH) -> None:
    cluster.preload_image(node, reference)
    nodes_sync_from_cluster()


def blind_choice(offering: Any) -> str:
    with transaction.atomic():
        placed = choose(offering)
    assert placed is not None
    return placed[0].name


def node_of(instance: Instance) -> str:
    assert instance.node is not None
    return instance.node.name


def order(user: Any, offering: Any) -> Instance:
    instance, _created = instance_order(user=user, offering_id=offering.id, image_id="pytorch-2.1")
    return instance


@pytest.fixture
def renter(settings: Any) -> Any:
    settings.MAX_RUNNING_GPUS = 100
    user = make_user()
    fund(user, 100_000_000)
    return user


def test_the_node_sync_stores_the_images_each_node_holds_and_drops_the_gone(catalog, cluster):
    cluster.set_image_size(PYTORCH, 18_000_000_000)
    warm(cluster, "gpu-h100-1")
    rows = NodeImage.objects.filter(node__name="gpu-h100-1")
    names = sorted(rows.values_list("name", flat=True))
    assert names[0] == NORMALIZED
    assert names[1].startswith("docker.io/starverse/pytorch@sha256:")
    assert {row.size_bytes for row in rows} == {18_000_000_000}
    assert not NodeImage.objects.exclude(node__name="gpu-h100-1").exists()

    cluster.reset()
    nodes_sync_from_cluster()
    assert not NodeImage.objects.exists()


def test_placement_takes_the_node_holding_the_image_when_nodes_fit_equally(
    catalog, cluster, renter
):
    offering = catalog["h100x1"]
    blind = blind_choice(offering)
    other = next(name for name in H100_NODES if name != blind)
    warm(cluster, other)
    assert node_of(order(renter, offering)) == other
    # an image no node holds: the order goes where it would have gone anyway
    with transaction.atomic():
        placed = choose(offering, image="registry.example/none:1")
    assert placed is not None and placed[0].name == other  # the fuller node now


def test_a_warm_empty_node_never_beats_the_fuller_node_best_fit_packs(catalog, cluster, renter):
    first = order(renter, Offering.objects.get(name="4× H100 80GB SXM"))
    fuller = node_of(first)
    emptier = next(name for name in H100_NODES if name != fuller)
    warm(cluster, emptier)
    # 4 GPUs left on the fuller node, 8 on the warm one: the cold, fuller node keeps packing
    assert node_of(order(renter, catalog["h100x1"])) == fuller
    # a whole-node rental goes to the warm empty node (the only one that fits)
    assert node_of(order(renter, catalog["h100_node"])) == emptier


def test_a_warm_node_does_not_let_a_later_order_jump_the_queue(catalog, cluster, renter):
    whole = [order(renter, catalog["h100x8"]) for _ in H100_NODES]
    assert all(instance.status == "provisioning" for instance in whole)
    waiting_8 = order(renter, catalog["h100x8"])
    waiting_1 = order(renter, catalog["h100x1"])
    assert (waiting_8.status, waiting_1.status) == ("queued", "queued")
    warm(cluster, node_of(whole[1]))
    instance_terminate(instance_id=whole[0].id)
    assert converge_until(converge.terminate, whole[0].id) == "terminated"
    queue_drain(product=catalog["h100x8"].gpu_model.product)
    waiting_8.refresh_from_db()
    waiting_1.refresh_from_db()
    # the first in the queue takes the freed node; the 1-GPU order behind it waits its turn
    assert (waiting_8.status, node_of(waiting_8)) == ("provisioning", node_of(whole[0]))
    assert waiting_1.status == "queued"


def daemonsets() -> dict[str, dict[str, Any]]:
    return kube.daemonsets_managed("starverse-prepull", prepull.PREPULL_LABEL)


def test_prepull_daemonsets_follow_the_catalogue(catalog, cluster):
    assert prepull.prepull_converge() == prepull.Converged(["prepull-pytorch-2-1"], [], [])
    made = daemonsets()["prepull-pytorch-2-1"]
    pod = made["spec"]["template"]["spec"]
    assert [c["image"] for c in pod["initContainers"]] == [PYTORCH]
    assert pod["initContainers"][0]["command"] == ["true"]
    assert [c["image"] for c in pod["containers"]] == ["registry.k8s.io/pause:3.9"]
    assert "nvidia.com/gpu" not in str(pod["containers"][0]["resources"])
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-GeForce-RTX-4090",
        "NVIDIA-H100-80GB-HBM3",
    ]
    # nothing changed: nothing is written (a replace would make generation 2)
    assert prepull.prepull_converge() == prepull.Converged([], [], [])
    assert daemonsets()["prepull-pytorch-2-1"]["metadata"]["generation"] == 1

    image = Image.objects.get(pk="pytorch-2.1")
    image.container_image = "starverse/pytorch:2.1.2-cuda12.1"
    image.save()
    assert prepull.prepull_converge() == prepull.Converged([], ["prepull-pytorch-2-1"], [])
    replaced = daemonsets()["prepull-pytorch-2-1"]
    assert replaced["metadata"]["generation"] == 2
    pod = replaced["spec"]["template"]["spec"]
    assert pod["initContainers"][0]["image"] == "starverse/pytorch:2.1.2-cuda12.1"

    Image.objects.filter(pk="tensorrt-llm-0.7").update(prepull=True)
    image.prepull = False
    image.save()
    assert prepull.prepull_converge() == prepull.Converged(
        ["prepull-tensorrt-llm-0-7"], [], ["prepull-pytorch-2-1"]
    )
    assert list(daemonsets()) == ["prepull-tensorrt-llm-0-7"]


def test_a_replace_after_the_controller_wrote_status_reads_again_and_succeeds(catalog, cluster):
    """The DaemonSet controller moves the resourceVersion with every status write, so a replace
    from an older list meets 409; it reads the current version and goes through."""
    prepull.prepull_converge()
    listed = daemonsets()["prepull-pytorch-2-1"]
    image = Image.objects.get(pk="pytorch-2.1")
    image.container_image = "starverse/pytorch:2.1.2-cuda12.1"
    body = prepull.manifest(image, prepull.gpu_product_labels())
    kube.daemonset_replace(body, listed)  # moves the version past `listed`
    body["spec"]["template"]["spec"]["initContainers"][0]["image"] = "starverse/pytorch:2.1.3"
    replaced = kube.daemonset_replace(body, listed)  # stale: 409, then read and replace
    assert replaced["metadata"]["generation"] == 3
    stored = daemonsets()["prepull-pytorch-2-1"]["spec"]["template"]["spec"]
    assert stored["initContainers"][0]["image"] == "starverse/pytorch:2.1.3"


def test_prepulled_images_reach_every_node_and_make_offerings_warm(catalog, cluster, client):
    prepull.prepull_converge()

    def everywhere() -> bool:
        nodes_sync_from_cluster()
        held = set(NodeImage.objects.filter(name=NORMALIZED).values_list("node__name", flat=True))
        return held == set(Node.objects.values_list("name", flat=True))

    wait_for(everywhere, what="the pre-pulled image on every node", timeout=10)
    rows = client.get("/api/v1/offerings?image=pytorch-2.1").json()
    rows = rows["results"] if isinstance(rows, dict) else rows
    assert {(row["image_warm"], row["expected_pull_s"]) for row in rows} == {(True, 0)}


def test_the_offerings_api_says_which_first_starts_pull_and_for_how_long(catalog, cluster, client):
    def rows(query: str = "") -> dict[str, dict[str, Any]]:
        answer = client.get(f"/api/v1/offerings{query}")
        assert answer.status_code == 200
        body = answer.json()
        return {row["name"]: row for row in (body["results"] if isinstance(body, dict) else body)}

    assert {(r["image_warm"], r["expected_pull_s"]) for r in rows().values()} == {(None, None)}
    # 18 GB at 800 MB/s
    cold = rows("?image=pytorch-2.1")
    assert {(r["image_warm"], r["expected_pull_s"]) for r in cold.values()} == {(False, 23)}
    warm(cluster, "gpu-h100-0")
    now = rows("?image=pytorch-2.1")
    assert (now["1× H100 80GB SXM"]["image_warm"], now["1× H100 80GB SXM"]["expected_pull_s"]) == (
        True,
        0,
    )
    assert now["8× H100 80GB SXM bare metal"]["image_warm"] is True
    assert now["1× A100 80GB SXM"]["expected_pull_s"] == 23
    assert rows("?image=tensorrt-llm-0.7")["1× H100 80GB SXM"]["expected_pull_s"] == 32

    refused = client.get("/api/v1/offerings?image=nope")
    assert refused.status_code == 400
    assert refused.json()["code"] == "unknown_image"
    assert "image" in refused.json()["detail"]


def test_images_list_their_size_and_prepull(catalog, client):
    body = client.get("/api/v1/images").json()
    rows = {row["id"]: row for row in (body["results"] if isinstance(body, dict) else body)}
    assert (rows["pytorch-2.1"]["size_bytes"], rows["pytorch-2.1"]["prepull"]) == (
        18_000_000_000,
        True,
    )
    assert rows["tensorrt-llm-0.7"]["prepull"] is False


def test_the_rent_page_marks_warm_and_cold_offerings(catalog, cluster, client):
    client.force_login(make_user())
    page = client.get(reverse("instances:rent")).content.decode()
    cold = "data-pull>First start pulls 18 GB (~23 s)</span>"
    assert page.count(cold) == page.count("data-pull>") == 14  # every offering
    warm(cluster, "gpu-h100-0")
    page = client.get(reverse("instances:rent")).content.decode()
    # the four H100 cloud sizes and the whole node: a free H100 node holds the image
    assert page.count("data-pull>Image ready: starts in seconds</span>") == 5
    assert page.count(cold) == 9
    assert "First start pulls 25 GB (~32 s)" in page  # TensorRT-LLM's line, for the script
