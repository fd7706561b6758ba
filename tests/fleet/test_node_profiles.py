"""Node profiles, set by operators in the admin: one is chosen per node by its labels (the
matching one with the most selector labels), and bad NCCL variable names are refused."""

import json

from fleet.models import Node, NodeProfile
from fleet.selectors import node_profile_for
from tests.factories import make_operator, staff_login

H100 = "NVIDIA-H100-80GB-HBM3"


def _node(name: str, **labels: str) -> Node:
    return Node.objects.create(
        name=name,
        gpu_product="NVIDIA H100 80GB HBM3",
        gpu_count=8,
        gpu_memory_mb=81559,
        labels=labels,
    )


def test_the_matching_profile_with_the_most_labels_wins(db):
    pool = NodeProfile.objects.create(name="h100", node_selector={"nvidia.com/gpu.product": H100})
    rack = NodeProfile.objects.create(
        name="h100-rack-9",
        node_selector={"nvidia.com/gpu.product": H100, "topology.starverse.io/rack": "r9"},
    )
    anywhere = NodeProfile.objects.create(name="a-default", node_selector={})
    assert node_profile_for(_node("n1", **{"nvidia.com/gpu.product": H100})) == pool
    assert (
        node_profile_for(
            _node("n2", **{"nvidia.com/gpu.product": H100, "topology.starverse.io/rack": "r9"})
        )
        == rack
    )
    assert node_profile_for(_node("n3", **{"nvidia.com/gpu.product": "other"})) == anywhere
    anywhere.delete()
    assert node_profile_for(_node("n4")) is None


def test_operators_set_profiles_in_the_admin(client, db):
    staff_login(client, make_operator())
    form = {
        "name": "h100-ib",
        "node_selector": json.dumps({"nvidia.com/gpu.product": H100}),
        "rdma_resource": "rdma/rdma_shared_device_a",
        "rdma_count": "1",
        "networks": "kube-system/ib-sriov",
        "host_network": "on",
        "nccl_env": '{"NCCL_IB_HCA": "mlx5", "nccl-bad": "1"}',
    }
    refused = client.post("/admin/fleet/nodeprofile/add/", form)
    assert refused.status_code == 200
    assert "nccl-bad is not an environment variable name." in refused.content.decode()
    assert not NodeProfile.objects.exists()

    saved = client.post(
        "/admin/fleet/nodeprofile/add/", {**form, "nccl_env": '{"NCCL_IB_HCA": "mlx5"}'}
    )
    assert saved.status_code == 302
    profile = NodeProfile.objects.get()
    assert (profile.rdma_resource, profile.host_network, profile.nccl_env) == (
        "rdma/rdma_shared_device_a",
        True,
        {"NCCL_IB_HCA": "mlx5"},
    )
    assert client.get("/admin/fleet/nodeprofile/").status_code == 200
