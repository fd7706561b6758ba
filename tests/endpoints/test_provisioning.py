"""The objects the worker writes for an endpoint on the local cluster: a Deployment our own
scheduler places, its Service, the KEDA HTTPScaledObject, the gateway's HTTPRoute; min/max
changes reach the autoscaler and the Deployment at once; deletion removes them all."""

import time
from datetime import timedelta

from django.utils import timezone

from endpoints import manifests
from endpoints.models import Endpoint
from endpoints.provisioning import endpoint_converge, endpoints_lost_work_hand_out
from endpoints.services import endpoint_change, endpoint_delete
from endpoints.tasks import reconcile_endpoints
from starverse.core import kube
from tests.factories import make_endpoint, make_user, read_existing


def test_the_endpoints_objects_are_made_once_and_follow_its_bounds(catalog, settings):
    settings.ENDPOINT_TARGET_CONCURRENCY = 3
    endpoint = make_endpoint(
        make_user(), engine="tensorrt-llm", engine_options={"quantization": "fp8"}
    )
    assert endpoint_converge(endpoint.id).state == "converged"
    endpoint.refresh_from_db()
    name, namespace = manifests.object_name(endpoint.id), endpoint.k8s_namespace
    assert endpoint.k8s_name == name
    deployment = read_existing("Deployment", namespace, name)
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert pod["schedulerName"] == "starverse-endpoints"
    engine = pod["containers"][0]
    assert engine["args"] == [
        "trtllm-serve",
        "/model",
        "--host",
        "0.0.0.0",  # noqa: S104 - the engine inside its pod
        "--port",
        "8000",
        "--served_model_name",
        "qwen",
        "--quantization",
        "fp8",
        "--tp_size",
        "1",
    ]
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert engine["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert {
        "name": "model",
        "mountPath": "/model",
        "readOnly": True,
        "subPath": "models/qwen2-7b-instruct",
    } in engine["volumeMounts"]
    assert read_existing("Service", namespace, name)["spec"]["ports"][0]["port"] == 8000
    scaled = read_existing("HTTPScaledObject", namespace, name)["spec"]
    assert scaled["hosts"] == [manifests.route_hostname(endpoint.id)]
    assert scaled["replicas"] == {"min": 1, "max": 2}
    assert scaled["scalingMetric"] == {"concurrency": {"targetValue": 3}}
    assert scaled["scaleTargetRef"] == {
        "name": name,
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "service": name,
        "port": 8000,
    }
    route = read_existing("HTTPRoute", namespace, name)["spec"]
    assert route["hostnames"] == [manifests.route_hostname(endpoint.id)]
    assert route["rules"][0]["backendRefs"] == [{"name": name, "port": 8000}]
    generation = deployment["metadata"]["generation"]

    # again: nothing changes (the generation moves only when the spec is written; the
    # controller's status updates move the resourceVersion meanwhile)
    endpoint_converge(endpoint.id)
    assert read_existing("Deployment", namespace, name)["metadata"]["generation"] == generation

    endpoint_change(endpoint=endpoint, min_replicas=2, max_replicas=4)
    endpoint_converge(endpoint.id)
    assert read_existing("Deployment", namespace, name)["spec"]["replicas"] == 2
    assert read_existing("HTTPScaledObject", namespace, name)["spec"]["replicas"] == {
        "min": 2,
        "max": 4,
    }

    endpoint_delete(endpoint=endpoint)
    assert endpoint_converge(endpoint.id).state == "deleted"
    for kind in ("Deployment", "Service", "HTTPScaledObject", "HTTPRoute"):
        assert kube.read(kind, namespace, name) is None, kind
    endpoint.refresh_from_db()
    assert endpoint.status == "deleted"


def test_the_instances_clean_up_leaves_an_endpoints_objects_alone(catalog):
    """The instances' reconcile pass removes what no instance wants in the tenant namespaces
    it sweeps; an endpoint's pods, Service, route and claim are its own controller's, so an
    account with both an instance and an endpoint keeps serving."""
    from instances.provisioning import reconcile
    from tests.factories import make_instance

    user = make_user()
    make_instance(user, status="running")  # its namespace is swept
    endpoint = make_endpoint(user)
    assert endpoint_converge(endpoint.id).state == "converged"
    endpoint.refresh_from_db()
    name, namespace = manifests.object_name(endpoint.id), endpoint.k8s_namespace

    def replica_pods() -> set[str]:
        return {pod.name for pod in kube.pods_managed([namespace]) if pod.name.startswith(name)}

    deadline = time.monotonic() + 15
    while not replica_pods() and time.monotonic() < deadline:
        time.sleep(0.1)
    pods_before = replica_pods()
    assert pods_before  # the Deployment's replica, waiting for our scheduler

    report = reconcile.reconcile()

    assert not [orphan for orphan in report.orphans if name in orphan]
    assert read_existing("Service", namespace, name)
    assert read_existing("HTTPRoute", namespace, name)
    assert replica_pods() == pods_before


def test_a_lost_converge_task_is_handed_out_again_and_makes_the_objects(
    catalog, settings, django_capture_on_commit_callbacks
):
    """The chaos drill (tests/chaos) found an endpoint provisioning for good: its converge task
    went with a worker killed with SIGKILL (or a flushed broker) and nothing sent it again.
    reconcile_endpoints hands it out again once the endpoint is RECONCILE_STUCK_AFTER_S old."""
    settings.RECONCILE_STUCK_AFTER_S = 60
    endpoint = make_endpoint(make_user())  # its task enqueued on commit: never sent here
    name = manifests.object_name(endpoint.id)
    young = endpoint.created_at + timedelta(seconds=30)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert endpoints_lost_work_hand_out(now=young) == []
    assert callbacks == []

    with django_capture_on_commit_callbacks(execute=True):
        reconcile_endpoints.delay()  # eager in tests, as the worker runs it from beat
    Endpoint.objects.filter(pk=endpoint.pk).update(created_at=timezone.now() - timedelta(minutes=5))
    with django_capture_on_commit_callbacks(execute=True):
        reconcile_endpoints.delay()
    endpoint.refresh_from_db()
    assert read_existing("Deployment", endpoint.k8s_namespace, name)["spec"]["replicas"] == 1

    endpoint_delete(endpoint=endpoint)  # its deletion's task lost as well
    with django_capture_on_commit_callbacks(execute=True):
        assert endpoints_lost_work_hand_out() == [endpoint.id]
    assert Endpoint.objects.get(pk=endpoint.pk).status == "deleted"
    assert kube.read("Deployment", endpoint.k8s_namespace, name) is None
    with django_capture_on_commit_callbacks(execute=False):
        assert endpoints_lost_work_hand_out() == []
