"""An endpoint runs in its source disk's region: its snapshot, claim, Deployment, Service and
route are made in that region's cluster, its pod is placed on that region's nodes and bound
there, and nothing of it reaches the default cluster."""

import time

from endpoints.models import Endpoint, EndpointReplica
from endpoints.provisioning import endpoint_converge
from endpoints.scheduler import endpoints_sync
from endpoints.selectors import endpoint_region
from endpoints.services import endpoint_create
from fleet.models import Region
from fleet.selectors import region_target
from starverse.core import kube
from storage.disks import disk_create
from storage.provisioning import disk_ensure
from tests.factories import fund, make_user
from tests.instances import test_regions as regions

REGION_B = regions.REGION_B
emulator_b, two_regions = regions.emulator_b, regions.two_regions  # the fixtures, shared


def _until(condition, timeout=15.0, step=None):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        if step is not None:
            step()
        time.sleep(0.02)


def _in_b():
    return kube.cluster(region_target(Region.objects.get(pk=REGION_B)))


def test_an_endpoint_of_a_disk_in_region_b_runs_in_region_b(two_regions):
    user = make_user()
    fund(user, 500_000)
    disk = disk_create(user=user, name="ckpt", size_gb=100, region=REGION_B)
    with _in_b():
        disk_ensure(disk.id)  # the storage task's work, in the disk's region
    endpoint, _ = endpoint_create(
        user=user,
        name="sft",
        source={"disk": disk.id, "path": "final"},
        engine="vllm",
        offering_id=two_regions["h100x1"].id,
        min_replicas=1,
        max_replicas=1,
    )
    assert endpoint_region(endpoint) == REGION_B
    deadline = time.monotonic() + 10
    while endpoint_converge(endpoint.id).wait:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    endpoint.refresh_from_db()
    namespace, name = endpoint.k8s_namespace, endpoint.k8s_name

    with _in_b():
        for kind in ("VolumeSnapshot", "Deployment", "Service", "HTTPScaledObject", "HTTPRoute"):
            assert kube.read(kind, namespace, name if kind != "VolumeSnapshot" else f"{name}-g1")
        assert kube.read("NetworkPolicy", namespace, "endpoint-ingress") is not None
    # the default cluster holds nothing of it
    assert kube.read("Deployment", namespace, name) is None
    assert kube.read("VolumeSnapshot", namespace, f"{name}-g1") is None

    _until(lambda: Endpoint.objects.get(pk=endpoint.pk).status == "running", step=endpoints_sync)
    replica = EndpointReplica.objects.get(endpoint=endpoint)
    assert replica.node is not None
    assert (replica.node.name, replica.node.region_id) == ("b-gpu-h100-0", REGION_B)
    with _in_b():
        pods = kube.pods_labelled([namespace], f"starverse.io/endpoint={name}")
    assert [p["spec"]["nodeName"] for p in pods] == ["b-gpu-h100-0"]
