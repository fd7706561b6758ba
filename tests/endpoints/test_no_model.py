"""A source folder without a model: the engine image's entry point exits with its own code and
a termination message (here the emulator's kubelet plays it: STARVERSE_STANDIN_EXIT on the
pod), and the scheduler fails the endpoint naming `source.path`, scales it to zero and frees
its GPUs; any other crash only counts a restart."""

import time

from starverse_init.serve import MODEL_MISSING_EXIT as IMAGE_EXIT

from compute.models import Allocation
from endpoints.engines import MODEL_MISSING_EXIT
from endpoints.models import Endpoint, EndpointReplica
from endpoints.provisioning import endpoint_converge
from endpoints.scheduler import endpoints_sync
from endpoints.services import endpoint_change, endpoint_create
from starverse.core import kube
from storage.provisioning import disk_ensure
from tests.factories import fund, make_disk, make_user, read_existing

MESSAGE = "source.path: /model holds no config.json (not a model folder)"


def _until(condition, timeout=15.0, step=None):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        if step is not None:
            step()
        time.sleep(0.02)


def _pods(endpoint):
    return kube.pods_labelled(
        [endpoint.k8s_namespace], f"starverse.io/endpoint={endpoint.k8s_name}"
    )


def _serve_disk(catalog, path="checkpoints/typo"):
    user = make_user()
    fund(user, 100_000)
    disk = make_disk(user)
    disk_ensure(disk.id)
    endpoint, _ = endpoint_create(
        user=user,
        name="sft",
        source={"disk": disk.id, "path": path},
        engine="vllm",
        offering_id=catalog["h100x1"].id,
        min_replicas=0,
        max_replicas=1,
    )
    deadline = time.monotonic() + 10
    while endpoint_converge(endpoint.id).wait:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    endpoint.refresh_from_db()
    return endpoint


def _start_with(endpoint, exit_env):
    """The replica's container as the image would run it: the Deployment's pods get the
    stand-in's exit, then one is asked for (as the autoscaler does on a request)."""
    kube._apps().patch_namespaced_deployment(
        endpoint.k8s_name,
        endpoint.k8s_namespace,
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "engine",
                                "env": [{"name": "STARVERSE_STANDIN_EXIT", "value": exit_env}],
                            }
                        ]
                    }
                }
            }
        },
    )
    kube.deployment_scale(endpoint.k8s_namespace, endpoint.k8s_name, 1)
    _until(lambda: len(_pods(endpoint)) == 1)


def test_the_image_and_the_platform_agree_on_the_exit_code():
    assert MODEL_MISSING_EXIT == IMAGE_EXIT == 66


def test_a_missing_model_fails_the_endpoint_naming_source_path(catalog):
    endpoint = _serve_disk(catalog)
    _start_with(endpoint, f"{MODEL_MISSING_EXIT}:{MESSAGE}")

    _until(
        lambda: Endpoint.objects.get(pk=endpoint.pk).status == "failed",
        step=endpoints_sync,
    )

    endpoint.refresh_from_db()
    assert endpoint.error_message == (
        "No model at source.path “checkpoints/typo”: the folder must hold a model's config.json "
        "(a Hugging Face checkpoint). Put the checkpoint there and update the endpoint, or make "
        f"a new one with the right path. The engine said: {MESSAGE}"
    )
    assert endpoint.cost_fen == 0  # never Ready: nothing billed
    # scaled to zero, the autoscaler's bounds too, so the pod does not come back
    deployment = read_existing("Deployment", endpoint.k8s_namespace, endpoint.k8s_name)
    assert deployment["spec"]["replicas"] == 0
    scaled = read_existing("HTTPScaledObject", endpoint.k8s_namespace, endpoint.k8s_name)
    assert scaled["spec"]["replicas"] == {"min": 0, "max": 0}
    _until(lambda: not _pods(endpoint), step=endpoints_sync)
    replica = EndpointReplica.objects.get(endpoint=endpoint)
    _until(
        lambda: EndpointReplica.objects.get(pk=replica.pk).gone_at is not None, step=endpoints_sync
    )
    assert not Allocation.objects.filter(holding__replica=replica).exists()
    # a failed endpoint is left alone by later passes and by its converge
    endpoints_sync()
    assert endpoint_converge(endpoint.id).state == "failed"
    assert Endpoint.objects.get(pk=endpoint.pk).status == "failed"

    # an update tries again: the failure is cleared and the bounds come back
    endpoint_change(endpoint=endpoint, update=True)
    endpoint.refresh_from_db()
    assert (endpoint.status, endpoint.error_message, endpoint.generation) == ("updating", "", 2)


def test_an_engine_crash_with_another_code_only_counts_restarts(catalog, cluster):
    endpoint = _serve_disk(catalog)
    _start_with(endpoint, "1:CUDA error: out of memory")

    _until(lambda: Endpoint.objects.get(pk=endpoint.pk).restarts >= 1, step=endpoints_sync)

    endpoint.refresh_from_db()
    assert endpoint.status != "failed"
    assert endpoint.error_message == ""
    status = _pods(endpoint)[0]["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert status["lastState"]["terminated"]["message"] == "CUDA error: out of memory"
