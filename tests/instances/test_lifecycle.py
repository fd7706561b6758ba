import base64
from datetime import timedelta

import pytest
from django.utils import timezone

from compute.models import Allocation
from instances.lifecycle import queue_drain
from instances.models import Instance, InstanceEvent
from instances.provisioning import converge, manifests
from starverse.core import kube
from tests.factories import converge_until, fund, make_user, read_existing


@pytest.fixture
def renter(catalog, client_for, settings):
    # Placement and the queue, with room for three whole nodes: the account limits have their
    # own tests (test_queue.py).
    settings.MAX_RUNNING_GPUS = 32
    user = make_user()
    fund(user, 100_000)
    return user, client_for(user)


def _order(client, offering, image, key=None, **extra):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return client.post(
        "/api/v1/instances",
        {"offering": offering.id, "image": image.id, **extra},
        format="json",
        **headers,
    )


def _pod(cluster_instance):
    return kube.read("Pod", cluster_instance.k8s_namespace, cluster_instance.k8s_name)


def test_catalog_shows_live_availability(catalog, api):
    offerings = {o["name"]: o for o in api.get("/api/v1/offerings").json()["results"]}

    assert offerings["8× H100 80GB SXM bare metal"]["available"] == 2
    assert offerings["1× H100 80GB SXM"]["available"] == 16
    assert offerings["4× RTX 4090 24GB"]["available"] == 2
    assert offerings["8× H100 80GB SXM bare metal"]["price_per_month_fen"] == 12_800_000
    assert {m["id"] for m in api.get("/api/v1/gpu-models").json()["results"]} == {
        "h100-80g",
        "a100-80g",
        "rtx4090",
    }
    assert len(api.get("/api/v1/images").json()["results"]) == 7


def test_full_lifecycle_through_the_real_client(renter, catalog, cluster):
    _user, client = renter
    ordered = _order(client, catalog["h100x1"], catalog["image"], name="llama-ft")

    assert ordered.status_code == 202
    body = ordered.json()
    assert (body["status"], body["gpu_count"], body["ssh"]) == ("provisioning", 1, None)
    instance = Instance.objects.get(pk=body["id"])
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()

    pod = _pod(instance)
    spec = pod["spec"]
    container = spec["containers"][0]
    assert instance.node is not None
    assert spec["nodeName"] == instance.node.name
    assert spec["automountServiceAccountToken"] is False
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    public = [m for m in container["volumeMounts"] if m["name"] == "public"]
    assert {(m["mountPath"], m["subPath"], m["readOnly"]) for m in public} == {
        ("/public/data", "data", True),
        ("/public/models", "models", True),
    }
    assert volumes["public"]["hostPath"]["path"] == "/srv/starverse/public"
    assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "starverse"
    detail = client.get(f"/api/v1/instances/{instance.id}").json()
    assert detail["status"] == "running"
    assert detail["ssh"]["command"] == f"ssh -p {instance.ssh_port} root@127.0.0.1"
    label = instance.id.lower().replace("_", "-")
    assert detail["jupyter_url"] == f"http://{label}-8888.localhost:8002/"  # no token in it
    assert detail["ports"] == []
    events = [
        e["message"]
        for e in client.get(f"/api/v1/instances/{instance.id}/events").json()["results"]
    ]
    assert events[0] == "Ordered." and events[-1] == "Running: billing started."
    assert any(message.startswith("Kubernetes: Pulled") for message in events)

    assert client.post(f"/api/v1/instances/{instance.id}/stop").json()["status"] == "stopping"
    assert converge_until(converge.stop, instance.id) == "stopped"
    instance.refresh_from_db()
    assert _pod(instance) is None
    assert kube.read(
        "PersistentVolumeClaim", instance.k8s_namespace, manifests.disk_name(instance.id)
    )
    assert Allocation.objects.count() == 0
    assert client.post(f"/api/v1/instances/{instance.id}/stop").status_code == 409

    assert client.post(f"/api/v1/instances/{instance.id}/start").json()["status"] == "provisioning"
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    assert instance.session == 2

    assert client.delete(f"/api/v1/instances/{instance.id}").json()["status"] == "terminating"
    assert converge_until(converge.terminate, instance.id) == "terminated"
    assert (
        kube.read("PersistentVolumeClaim", instance.k8s_namespace, manifests.disk_name(instance.id))
        is None
    )
    assert kube.read("Service", instance.k8s_namespace, instance.k8s_name) is None
    assert Allocation.objects.count() == 0


def test_no_runway_is_402_and_creates_nothing(catalog, client_for):
    # ¥10 of trial credit, which 8× H100 (cloud, ¥176 an hour) has no trial price to take
    client = client_for(make_user())

    response = _order(client, catalog["h100x8"], catalog["image"])

    assert response.status_code == 402
    assert response.json()["code"] == "insufficient_balance"
    assert "¥176.00" in response.json()["detail"]
    assert Instance.objects.count() == 0


def test_idempotency_key_answers_the_same_instance(renter, catalog):
    _user, client = renter

    first = _order(client, catalog["h100x1"], catalog["image"], key="order-42")
    again = _order(client, catalog["h100x1"], catalog["image"], key="order-42")
    other = _order(client, catalog["h100x8"], catalog["image"], key="order-42")

    assert first.json()["id"] == again.json()["id"]
    assert other.status_code == 409
    assert Instance.objects.count() == 1


def test_whole_nodes_go_to_free_nodes_and_gpus_best_fit(renter, catalog):
    _user, client = renter
    one = Instance.objects.get(pk=_order(client, catalog["h100x1"], catalog["image"]).json()["id"])
    two = Instance.objects.get(pk=_order(client, catalog["h100x1"], catalog["image"]).json()["id"])
    node = Instance.objects.get(
        pk=_order(client, catalog["h100_node"], catalog["image"]).json()["id"]
    )
    third = _order(client, catalog["h100_node"], catalog["image"]).json()

    assert one.node_id == two.node_id  # best fit packs the partly used node
    assert node.node_id != one.node_id
    assert sorted(
        Allocation.objects.filter(holding__instance=node).values_list("gpu_index", flat=True)
    ) == list(range(8))
    assert (third["status"], third["queue_position"]) == ("queued", 1)
    from compute.selectors import capacity_by_model

    h100 = next(r for r in capacity_by_model() if r["gpu_product"] == "NVIDIA H100 80GB HBM3")
    assert (h100["total"], h100["allocated"], h100["unhealthy"], h100["free"]) == (16, 10, 0, 6)


def test_concurrent_orders_never_double_book(transactional_db, cluster, client_for):
    from django.core.management import call_command

    from compute.models import Offering
    from fleet.services import nodes_sync_from_cluster
    from instances.lifecycle import instance_order, instance_terminate
    from tests.conftest import run_threads

    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    users = [make_user() for _ in range(21)]
    for user in users:
        fund(user, 10_000)

    results = run_threads(
        21,
        lambda i: (
            instance_order(user=users[i], offering_id=offering.id, image_id="pytorch-2.1")[0].status
        ),
    )

    assert sorted(results).count("provisioning") == 16, results
    assert sorted(results).count("queued") == 5
    pairs = list(Allocation.objects.values_list("node_id", "gpu_index"))
    assert len(pairs) == len(set(pairs)) == 16
    oldest = Instance.objects.filter(status="queued").order_by("holding__queued_at").first()
    assert oldest is not None
    # after commit the (eager) provisioning tasks have brought the placed ones up
    assert Instance.objects.filter(status="running").count() == 16
    victim = Instance.objects.filter(status="running").first()
    assert victim is not None
    instance_terminate(instance_id=victim.id)
    converge_until(converge.terminate, victim.id)
    oldest.refresh_from_db()
    assert oldest.status in ("provisioning", "running")
    assert Instance.objects.filter(status="queued").count() == 4


def test_image_pull_failure_fails_unbilled(renter, catalog, cluster):
    _user, client = renter
    cluster.fail_image_pull("pytorch")
    instance = Instance.objects.get(
        pk=_order(client, catalog["h100x1"], catalog["image"]).json()["id"]
    )

    assert converge_until(converge.provision, instance.id) == "failed"

    instance.refresh_from_db()
    assert "could not be pulled" in instance.error_message
    assert (instance.cost_fen, instance.running_since) == (0, None)
    assert Allocation.objects.count() == 0


def test_api_errors_are_retried_and_a_rerun_after_a_crash_completes(renter, catalog, cluster):
    _user, client = renter
    instance = Instance.objects.get(
        pk=_order(client, catalog["h100x1"], catalog["image"]).json()["id"]
    )
    cluster.inject_api_fault(status=500, count=1, verb="create", resource="pods")

    with pytest.raises(kube.RetryableKubeError):
        converge.provision(instance.id)  # the task would retry with backoff
    assert converge_until(converge.provision, instance.id) == "running"  # 409s read and compared
    assert InstanceEvent.objects.filter(instance=instance, status="running").count() == 1


def test_node_lost_mid_run_fails_the_instance_and_tells_the_user(
    renter, catalog, cluster, django_capture_on_commit_callbacks
):
    from fleet.services import node_transition

    _user, client = renter
    instance = Instance.objects.get(
        pk=_order(client, catalog["h100x1"], catalog["image"], auto_recover=False).json()["id"]
    )
    converge_until(converge.provision, instance.id)
    instance.refresh_from_db()

    # The fleet tells the instances app after its transaction commits.
    assert instance.node is not None
    with django_capture_on_commit_callbacks(execute=True):
        node_transition(node=instance.node, to="down", reason="heartbeat lost: no report for 61 s")

    instance.refresh_from_db()
    assert instance.status == "failed"
    assert "lost" in instance.error_message and instance.running_since is None
    assert Allocation.objects.count() == 0


def test_queued_order_can_be_cancelled_free(renter, catalog):
    _user, client = renter
    for _ in range(2):
        _order(client, catalog["h100_node"], catalog["image"])
    queued = _order(client, catalog["h100_node"], catalog["image"]).json()

    cancelled = client.delete(f"/api/v1/instances/{queued['id']}")
    converge_until(converge.terminate, queued["id"])

    assert cancelled.status_code == 202
    assert Instance.objects.get(pk=queued["id"]).status == "terminated"
    assert queue_drain(product="NVIDIA H100 80GB HBM3") == []
    assert timezone.now()  # nothing billed: no usage rows
    from billing.models import LedgerTransaction

    assert not LedgerTransaction.objects.filter(instance_id=queued["id"]).exists()


def test_chosen_ssh_keys_are_the_ones_installed_and_others_are_refused(renter, catalog):
    import base64

    from tests.factories import make_ssh_key

    user, client = renter
    chosen, other = make_ssh_key(user, "laptop"), make_ssh_key(user, "ci")
    stranger_key = make_ssh_key(make_user(), "theirs")

    refused = _order(client, catalog["h100x1"], catalog["image"], ssh_keys=[stranger_key.id])
    disks = _order(client, catalog["h100x1"], catalog["image"], disks=["dsk_x"])
    ordered = _order(client, catalog["h100x1"], catalog["image"], ssh_keys=[chosen.id])

    assert (refused.status_code, refused.json()["code"]) == (400, "unknown_ssh_key")
    assert (disks.status_code, disks.json()["code"]) == (404, "disk_not_found")
    assert Instance.objects.filter(status="provisioning").count() == 1  # that order rolled back
    instance = Instance.objects.get(pk=ordered.json()["id"])
    converge_until(converge.provision, instance.id)
    instance.refresh_from_db()
    secret = read_existing("Secret", instance.k8s_namespace, f"{instance.k8s_name}-access")
    installed = base64.b64decode(secret["data"]["authorized_keys"]).decode()
    assert chosen.public_key in installed and other.public_key not in installed


def test_instance_payload_keys_match_the_documented_fields(renter, catalog):
    from instances.api.serializers import InstanceOutput

    _user, client = renter
    body = _order(client, catalog["h100x1"], catalog["image"]).json()

    assert set(body) == set(InstanceOutput().fields)
    assert set(client.get("/api/v1/instances").json()["results"][0]) == set(InstanceOutput().fields)


def test_the_timeline_is_shown_in_the_readers_language(renter, catalog):
    _user, client = renter
    instance_id = client.post(
        "/api/v1/instances",
        {"offering": catalog["h100x1"].id, "image": "pytorch-2.1"},
        format="json",
        HTTP_ACCEPT_LANGUAGE="en",
    ).json()["id"]

    english = client.get(f"/api/v1/instances/{instance_id}/events", HTTP_ACCEPT_LANGUAGE="en")
    chinese = client.get(f"/api/v1/instances/{instance_id}/events", HTTP_ACCEPT_LANGUAGE="zh-Hans")

    placed_on = Instance.objects.get(pk=instance_id).node
    assert placed_on is not None
    node = placed_on.name
    assert [e["message"] for e in english.json()["results"]] == ["Ordered.", f"Placed on {node}."]
    assert [e["message"] for e in chinese.json()["results"]] == ["已下单。", f"已分配到 {node}。"]


def test_a_start_renders_the_access_secret_afresh_and_runs_its_own_clock(renter, catalog):
    from tests.factories import make_ssh_key

    user, client = renter
    instance = Instance.objects.get(
        pk=_order(client, catalog["h100x1"], catalog["image"]).json()["id"]
    )
    converge_until(converge.provision, instance.id)
    client.post(f"/api/v1/instances/{instance.id}/stop")
    converge_until(converge.stop, instance.id)
    # ordered long ago: the timeout runs from this start, not from the order
    Instance.objects.filter(pk=instance.pk).update(created_at=timezone.now() - timedelta(hours=2))
    added = make_ssh_key(user, "new-laptop")

    client.post(f"/api/v1/instances/{instance.id}/start")
    assert converge_until(converge.provision, instance.id) == "running"

    instance.refresh_from_db()
    secret = read_existing("Secret", instance.k8s_namespace, f"{instance.k8s_name}-access")
    assert added.public_key in base64.b64decode(secret["data"]["authorized_keys"]).decode()
    assert _pod(instance)["status"]["phase"] == "Running"


def test_a_pod_gone_while_starting_is_created_again(renter, catalog, cluster):
    _user, client = renter
    cluster.set_pull_delay(3600)
    instance = Instance.objects.get(
        pk=_order(client, catalog["h100x1"], catalog["image"]).json()["id"]
    )
    with pytest.raises(converge.StillPending):
        converge.provision(instance.id)
    instance.refresh_from_db()
    kube.delete("Pod", instance.k8s_namespace, instance.k8s_name, force=True)

    with pytest.raises(converge.StillPending):
        converge.provision(instance.id)  # sees it gone
    cluster.set_pull_delay(0.02)

    assert converge_until(converge.provision, instance.id) == "running"
    assert instance.node is not None
    assert _pod(instance)["spec"]["nodeName"] == instance.node.name


def test_a_stopping_instance_on_a_lost_node_is_left_to_its_stop(
    renter, catalog, cluster, django_capture_on_commit_callbacks
):
    from fleet.services import node_transition

    _user, client = renter
    instance = Instance.objects.get(
        pk=_order(client, catalog["h100x1"], catalog["image"], auto_recover=False).json()["id"]
    )
    converge_until(converge.provision, instance.id)
    client.post(f"/api/v1/instances/{instance.id}/stop")
    instance.refresh_from_db()
    assert instance.node is not None

    cluster.lose_node(instance.node.name)
    with django_capture_on_commit_callbacks(execute=True):
        node_transition(node=instance.node, to="down", reason="heartbeat lost: no report for 61 s")

    assert Instance.objects.get(pk=instance.pk).status == "stopping"
    assert converge_until(converge.stop, instance.id) == "stopped"  # the pod is freed at once
    assert Allocation.objects.count() == 0


def test_a_node_the_cluster_does_not_list_takes_no_orders(renter, catalog):
    from compute.placement import capacity
    from fleet.models import Node

    _user, client = renter
    h100 = catalog["h100_node"].gpu_model.product
    rogue = Node.objects.create(
        name="gpu-rogue-01", gpu_product=h100, gpu_count=8, gpu_memory_mb=81559
    )
    listed = {name for _id, name, _count in capacity(h100)[0]}

    orders = [_order(client, catalog["h100_node"], catalog["image"]).json() for _ in range(3)]

    assert "gpu-rogue-01" not in listed
    assert len(listed) == 2
    assert [o["status"] for o in orders][2] == "queued"
    assert not Allocation.objects.filter(node=rogue).exists()


def test_without_a_cluster_every_ready_node_is_placed_on(db, settings):
    from compute.placement import capacity
    from fleet.models import Node

    settings.KUBECONFIG = None
    Node.objects.create(name="gpu-solo-01", gpu_product="L4", gpu_count=1, gpu_memory_mb=24)

    assert [name for _id, name, _count in capacity("L4")[0]] == ["gpu-solo-01"]
