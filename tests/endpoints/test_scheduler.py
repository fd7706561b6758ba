"""The endpoints' scheduler and meter on the local cluster: a replica's pod waits for our
binding, gets GPUs by the instances' placement (allocation rows, so nothing double-books), is
billed per minute while Ready (and only then), and gives its GPUs back when it is gone."""

import time
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from billing.models import LedgerTransaction
from compute.metering import meter_tick
from compute.models import Allocation, Holding
from endpoints.manifests import route_hostname
from endpoints.models import Endpoint, EndpointReplica
from endpoints.provisioning import endpoint_converge
from endpoints.scheduler import SyncResult, endpoints_sync
from endpoints.services import endpoint_change, endpoint_delete
from starverse.core import kube
from tests.factories import fund, holding_save, make_endpoint, make_user


def _pods(endpoint):
    return kube.pods_labelled(
        [endpoint.k8s_namespace], f"starverse.io/endpoint={endpoint.k8s_name}"
    )


def _until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _ready(pod):
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def test_a_replica_is_placed_bound_billed_while_ready_and_released(catalog):
    endpoint = make_endpoint(make_user(), min_replicas=1, max_replicas=2)
    endpoint_converge(endpoint.id)
    endpoint.refresh_from_db()
    _until(lambda: len(_pods(endpoint)) == 1)
    pod = _pods(endpoint)[0]
    assert pod["spec"].get("nodeName") is None  # our scheduler's, not the emulator's

    result = endpoints_sync()
    assert result.bound == [pod["metadata"]["name"]]
    replica = EndpointReplica.objects.get(endpoint=endpoint)
    held = list(
        Allocation.objects.filter(holding__replica=replica).values_list("node__name", "gpu_index")
    )
    assert len(held) == 1
    _until(lambda: _ready(_pods(endpoint)[0]))
    assert _pods(endpoint)[0]["spec"]["nodeName"] == held[0][0]

    start = timezone.now()
    endpoints_sync(now=start)
    replica.refresh_from_db()
    assert replica.ready_since == start
    endpoint.refresh_from_db()
    assert (endpoint.status, endpoint.replicas_ready) == ("running", 1)
    assert endpoint.cold_start_s is not None

    # two closed minutes, accrued once however often the meter ticks; posted at the hour
    endpoints_sync(now=start + timedelta(seconds=150))
    meter_tick(now=start + timedelta(seconds=150))
    meter_tick(now=start + timedelta(seconds=150))
    price = endpoint.offering.price_per_hour_fen
    rows = LedgerTransaction.objects.filter(idempotency_key__startswith=f"endpoint:{replica.id}:")
    assert not rows.exists()
    assert Holding.objects.get(pk=replica.id).pending_minutes == 2
    endpoint.refresh_from_db()
    assert endpoint.cost_fen == round(price * 2 / 60)

    # scaled to zero: the pod goes, its started third minute is paid and the session posted in
    # one line, its GPU freed
    endpoint_change(endpoint=endpoint, min_replicas=0, max_replicas=2)
    kube.deployment_scale(endpoint.k8s_namespace, endpoint.k8s_name, 0)
    _until(lambda: not _pods(endpoint))
    endpoints_sync(now=start + timedelta(seconds=170))
    replica.refresh_from_db()
    assert replica.gone_at is not None
    assert not Allocation.objects.filter(holding__replica=replica).exists()
    assert list(rows.all().values_list("idempotency_key", "minutes")) == [
        (f"endpoint:{replica.id}:1:1-3", 3)
    ]
    endpoint.refresh_from_db()
    assert endpoint.cost_fen == sum(-r.amount_fen for r in rows.all()) == round(price * 3 / 60)
    assert (endpoint.status, endpoint.replicas_ready) == ("scaled_to_zero", 0)


def test_a_replica_that_never_becomes_ready_costs_nothing(catalog, cluster):
    endpoint = make_endpoint(make_user())
    cluster.fail_image_pull("starverse/vllm:0.6-cuda12.1")
    try:
        endpoint_converge(endpoint.id)
        endpoint.refresh_from_db()
        _until(lambda: len(_pods(endpoint)) == 1)
        endpoints_sync()
        later = timezone.now() + timedelta(minutes=5)
        endpoints_sync(now=later)
    finally:
        cluster.clear_image_pull_failures()
    replica = EndpointReplica.objects.get(endpoint=endpoint)
    assert replica.ready_since is None
    assert not LedgerTransaction.objects.filter(idempotency_key__startswith="endpoint:").exists()
    assert Endpoint.objects.get(pk=endpoint.pk).cost_fen == 0


def test_a_pod_waits_pending_while_its_gpus_are_held_by_instances(catalog):
    user = make_user()
    fund(user, 1_000_000)
    endpoint = make_endpoint(user, offering_id=catalog["h100x8"].id)
    # every H100 of the emulated fleet (2 nodes × 8) taken by allocations of another holder
    taker = make_endpoint(make_user(), name="taker")
    replica = EndpointReplica.objects.create(endpoint=taker, pod_name="elsewhere")
    from fleet.models import Node

    holding = holding_save(replica, waiting=False)
    Allocation.objects.bulk_create(
        [
            Allocation(node=node, gpu_index=i, holding=holding)
            for node in Node.objects.filter(gpu_product__icontains="H100")
            for i in range(node.gpu_count)
        ]
    )
    endpoint_converge(endpoint.id)
    endpoint.refresh_from_db()
    _until(lambda: len(_pods(endpoint)) == 1)
    result = endpoints_sync()
    assert result.bound == []
    assert result.waiting == [_pods(endpoint)[0]["metadata"]["name"]]
    assert not EndpointReplica.objects.filter(endpoint=endpoint).exists()
    assert _pods(endpoint)[0]["spec"].get("nodeName") is None


def test_a_pod_placed_by_a_pass_that_stopped_before_binding_is_bound_by_the_next(catalog):
    from fleet.models import Node

    endpoint = make_endpoint(make_user())
    endpoint_converge(endpoint.id)
    endpoint.refresh_from_db()
    _until(lambda: len(_pods(endpoint)) == 1)
    pod = _pods(endpoint)[0]
    node = Node.objects.filter(gpu_product__icontains="H100").order_by("name").last()
    assert node is not None
    # what the stopped pass left: the replica and its GPU, committed, the pod unbound
    replica = EndpointReplica.objects.create(
        endpoint=endpoint, pod_name=pod["metadata"]["name"], node=node
    )
    holding_save(replica, placement=(node, [0]))
    result = endpoints_sync()
    assert result.bound == []
    _until(lambda: _pods(endpoint)[0]["spec"].get("nodeName") == node.name)
    assert EndpointReplica.objects.filter(endpoint=endpoint).count() == 1
    assert list(
        Allocation.objects.filter(holding__replica__endpoint=endpoint).values_list(
            "node", flat=True
        )
    ) == [node.pk]


def _scale(endpoint):
    deployment = kube.read("Deployment", endpoint.k8s_namespace, endpoint.k8s_name) or {}
    return deployment["spec"]["replicas"]


def test_desired_replicas_are_what_the_autoscaler_wrote(catalog, cluster, client_for):
    """KEDA scales the Deployment, not the endpoint's row: each pass reads `spec.replicas`."""
    from tests.devstack.test_kube_keda import Counts

    endpoint = make_endpoint(make_user(), min_replicas=1, max_replicas=2)
    endpoint_converge(endpoint.id)
    endpoint.refresh_from_db()
    api = client_for(endpoint.created_by)

    def desired():
        answer = api.get(f"/api/v1/endpoints/{endpoint.id}")
        assert answer.status_code == 200, answer.content
        return answer.json()["replicas"]["desired"]

    endpoints_sync()
    assert desired() == 1
    counts = Counts()
    try:
        # 8 requests in flight at 4 a replica (ENDPOINT_TARGET_CONCURRENCY): 2, the max
        counts.document = {route_hostname(endpoint.id): {"concurrency": 8}}
        cluster.set_keda_queue_url(counts.url)
        cluster.keda.refresh()
        cluster.step(cluster.keda.polling_interval_s)
        _until(lambda: _scale(endpoint) == 2)
        assert desired() == 1  # the platform's own last write, until a pass reads the cluster
        endpoints_sync()
        assert desired() == 2
        # idle for its scale-down period: back to the minimum
        counts.document = {}
        cluster.keda.refresh()
        cluster.step(cluster.keda.polling_interval_s)
        cluster.step(settings.ENDPOINT_SCALEDOWN_PERIOD_S)
        _until(lambda: _scale(endpoint) == 1)
        endpoints_sync()
        assert desired() == 1
    finally:
        cluster.set_keda_queue_url(None)
        counts.close()
    assert Endpoint.objects.get(pk=endpoint.pk).replicas_desired == 1


def test_with_no_live_endpoint_a_pass_is_one_query_and_asks_the_cluster_nothing(
    catalog, cluster, django_assert_num_queries
):
    user = make_user()
    # nothing to serve: one failed, one deleted whose replica is gone, one deleting
    failed, deleted, deleting = (make_endpoint(user, name=n) for n in ("a", "b", "c"))
    for endpoint, status in ((failed, "failed"), (deleted, "deleted"), (deleting, "deleting")):
        Endpoint.objects.filter(pk=endpoint.pk).update(
            status=status, k8s_name=f"ep-{endpoint.name}", k8s_namespace="tenant-x"
        )
    gone = EndpointReplica.objects.create(endpoint=deleted, pod_name="gone", gone_at=timezone.now())
    holding_save(gone, waiting=False)
    mark = cluster.requests_total
    with django_assert_num_queries(1):
        result = endpoints_sync()
    assert result == SyncResult()
    assert cluster.requests_since(mark) == []
    assert cluster.requests_total == mark


def test_a_replica_still_holding_gpus_keeps_the_pass_going(catalog, cluster):
    """A deleted endpoint whose pod is gone gives its GPUs back on the next pass."""
    from fleet.models import Node

    endpoint = make_endpoint(make_user())
    Endpoint.objects.filter(pk=endpoint.pk).update(
        status="deleted", k8s_name="ep-x", k8s_namespace="tenant-x"
    )
    node = Node.objects.filter(gpu_product__icontains="H100").first()
    assert node is not None
    replica = EndpointReplica.objects.create(endpoint=endpoint, pod_name="ep-x-1", node=node)
    holding_save(replica, placement=(node, [0]))
    mark = cluster.requests_total
    result = endpoints_sync()
    assert result.released == ["ep-x-1"]
    assert not Allocation.objects.filter(holding__replica=replica).exists()
    assert cluster.requests_since(mark) == [
        ("GET", "/api/v1/namespaces/tenant-x/pods"),
        ("GET", "/apis/apps/v1/namespaces/tenant-x/deployments"),
    ]


def test_a_pass_lists_pods_and_deployments_once_a_namespace_however_many_endpoints(
    catalog, cluster
):
    user = make_user()
    first = make_endpoint(user, name="one", min_replicas=1, max_replicas=1)
    second = make_endpoint(user, name="two", min_replicas=1, max_replicas=1)
    for endpoint in (first, second):
        endpoint_converge(endpoint.id)
        endpoint.refresh_from_db()

    def both_running():
        endpoints_sync()
        return set(
            Endpoint.objects.filter(pk__in=[first.pk, second.pk]).values_list("status", flat=True)
        ) == {"running"}

    _until(both_running)
    namespace = first.k8s_namespace
    mark = cluster.requests_total
    endpoints_sync()
    assert cluster.requests_since(mark) == [
        ("GET", f"/api/v1/namespaces/{namespace}/pods"),
        ("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments"),
    ]


def test_a_deleted_endpoints_replica_bills_to_the_delete_not_to_its_pods_end(catalog):
    """Found by the chaos drill: a delete whose task was lost with its worker (the beat stopped
    too) left the replica billing until the delete was sent again minutes later. Billing ends
    when the delete is asked, the minute in progress paid, however long the pod lives on; no
    pass opens a new session for it."""
    endpoint = make_endpoint(make_user(), min_replicas=1, max_replicas=1)
    endpoint_converge(endpoint.id)
    endpoint.refresh_from_db()
    _until(lambda: len(_pods(endpoint)) == 1)
    endpoints_sync()
    _until(lambda: _ready(_pods(endpoint)[0]))
    start = timezone.now() - timedelta(seconds=90)
    endpoints_sync(now=start)
    replica = EndpointReplica.objects.get(endpoint=endpoint)
    assert Holding.objects.get(pk=replica.id).metered_since == start

    endpoint_delete(endpoint=endpoint)  # no converge task runs: the pod stays Ready
    assert Holding.objects.get(pk=replica.id).metered_since is None
    later = timezone.now() + timedelta(minutes=10)
    for now in (later, later + timedelta(minutes=5)):
        endpoints_sync(now=now)
        meter_tick(now=now)
    assert _ready(_pods(endpoint)[0])
    price = endpoint.offering.price_per_hour_fen
    rows = LedgerTransaction.objects.filter(idempotency_key__startswith=f"endpoint:{replica.id}:")
    assert list(rows.values_list("minutes", flat=True)) == [2]
    endpoint.refresh_from_db()
    assert endpoint.cost_fen == -rows.get().amount_fen == round(price * 2 / 60)
    replica.refresh_from_db()
    assert (replica.session, replica.ready_since) == (1, None)


def test_an_endpoint_whose_converge_stopped_before_its_service_is_not_called_running(
    catalog, cluster
):
    """Found by the chaos drill: a converge cut short after the Deployment (a worker killed, a
    failed call) left the endpoint's pod Ready and no Service; the pass called it running, so
    the lost-work handout, which sends converge again only to endpoints still provisioning,
    never made the Service. It stays provisioning until converge has made every object."""
    endpoint = make_endpoint(make_user())
    cluster.inject_api_fault(status=500, count=5, verb="create", resource="services")
    try:
        endpoint_converge(endpoint.id)
    except kube.KubeError:
        pass
    else:
        raise AssertionError("the Service's creation was refused: converge must fail")
    cluster.clear_api_faults()
    endpoint.refresh_from_db()
    assert kube.read("Service", endpoint.k8s_namespace, endpoint.k8s_name) is None
    _until(lambda: len(_pods(endpoint)) == 1)
    endpoints_sync()  # placed and bound
    _until(lambda: _ready(_pods(endpoint)[0]))

    endpoints_sync()
    endpoint.refresh_from_db()
    assert (endpoint.status, endpoint.replicas_ready) == ("provisioning", 1)

    endpoint_converge(endpoint.id)  # as the handout sends it again
    assert kube.read("Service", endpoint.k8s_namespace, endpoint.k8s_name) is not None
    endpoints_sync()
    assert Endpoint.objects.get(pk=endpoint.pk).status == "running"
