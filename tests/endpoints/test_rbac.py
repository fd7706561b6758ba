"""The worker's rights as deploy/k8s/platform.yaml grants them cover what it does for
endpoints: snapshot a disk, restore the claim, write the Deployment, Service, HTTPScaledObject
and route, bind the pods it placed, scale at once, update and delete, never refused."""

import logging
import time

import pytest

from compute.models import Offering
from endpoints.models import EndpointReplica
from endpoints.provisioning import endpoint_converge
from endpoints.scheduler import endpoints_sync
from endpoints.services import endpoint_change, endpoint_create, endpoint_delete
from storage import provisioning as storage
from storage.disks import disk_create
from tests.factories import fund, make_user
from tests.instances.test_cluster_rbac import (  # noqa: F401 - the fixtures
    _forbidden_logged,
    as_worker,
    rbac_emulator,
)


def _converged(endpoint_id):
    deadline = time.monotonic() + 10
    while endpoint_converge(endpoint_id).wait:
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.usefixtures("as_worker")
def test_the_manifest_grants_the_worker_all_it_does_for_endpoints(db, caplog):
    caplog.set_level(logging.WARNING)
    user = make_user()
    fund(user, 1_000_000)
    disk = disk_create(user=user, name="ckpt", size_gb=100)
    assert storage.disk_ensure(disk.id) == "available"
    endpoint, _ = endpoint_create(
        user=user,
        name="sft",
        source={"disk": disk.id, "path": "final"},
        engine="vllm",
        offering_id=Offering.objects.get(name="1× H100 80GB SXM").id,
        min_replicas=1,
        max_replicas=2,
    )
    _converged(endpoint.id)
    deadline = time.monotonic() + 10
    while not EndpointReplica.objects.filter(endpoint=endpoint).exists():
        endpoints_sync()  # lists pods, binds the new one
        assert time.monotonic() < deadline
        time.sleep(0.05)
    endpoint_change(endpoint=endpoint, min_replicas=2, max_replicas=2)
    _converged(endpoint.id)  # scales the Deployment, replaces the HTTPScaledObject
    endpoint_change(endpoint=endpoint, update=True)
    _converged(endpoint.id)  # a second snapshot, the Deployment replaced
    endpoint_delete(endpoint=endpoint)
    _converged(endpoint.id)
    assert _forbidden_logged(caplog) == []
