"""What every rank of a cluster gets on the cluster, read back from the emulator over HTTP: a
4-node DeepSpeed cluster's pods (labels, stable DNS names, the launcher environment, the node
profile's RDMA resource and NCCL settings), its headless Service, its shared SSH key Secret in
the tenant's namespace only, its files ConfigMap (hostfiles, launch scripts) mounted beside the
access Secret, the API's hosts and launch command, node profiles with networks and host
networking, and Megatron-LM's degrees checked at the order."""

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command

from clusters import pods
from clusters.models import Cluster
from clusters.preflight import preflight_run
from compute.models import Offering
from devstack.kube.emulator import KubeEmulator
from fleet.models import NodeProfile
from fleet.services import nodes_sync_from_cluster
from instances.models import Instance
from instances.provisioning import converge, manifests
from instances.provisioning.reconcile import reconcile
from starverse.core import kube
from starverse.core.hostkeys import host_key_from_private
from tests.conftest import KUBE_TIMINGS
from tests.factories import (
    WHOLE_NODE,
    converge_until,
    fund,
    make_cluster,
    make_user,
    read_existing,
)

FOUR = {"h100": 4, "a100": 1}
RDMA = "rdma/rdma_shared_device_a"


@pytest.fixture(scope="module")
def four_node_emulator() -> Iterator[KubeEmulator]:
    emulator = KubeEmulator(fleet=FOUR, **KUBE_TIMINGS).start()
    yield emulator
    emulator.stop()


@pytest.fixture
def fleet4(four_node_emulator, db, settings, tmp_path) -> Iterator[KubeEmulator]:
    """The platform on a fleet of four H100 nodes (one leaf switch) and one A100, with the
    seeded catalog and node profiles."""
    four_node_emulator.reset()
    settings.MAX_RUNNING_GPUS = 64
    settings.KUBECONFIG = str(four_node_emulator.write_kubeconfig(tmp_path / "kubeconfig"))
    kube._api_client.cache_clear()
    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    yield four_node_emulator
    kube._api_client.cache_clear()


def _running(cluster: Cluster) -> list[Instance]:
    rows = list(
        Instance.objects.filter(cluster_rank__cluster=cluster).order_by("cluster_rank__index")
    )
    for rank in rows:
        assert converge_until(converge.provision, rank.id) == "checking"
    assert preflight_run(cluster.id) == "passed"  # the emulator's simulated check
    return list(
        Instance.objects.filter(cluster_rank__cluster=cluster).order_by("cluster_rank__index")
    )


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_a_4_node_deepspeed_cluster_gives_every_rank_its_env_files_and_names(fleet4, client_for):
    user = make_user()
    cluster = make_cluster(user, node_count=4, template="deepspeed")
    rows = _running(cluster)
    namespace = rows[0].k8s_namespace
    dns = pods.cluster_dns(cluster.id)
    assert dns == cluster.id.lower().replace("_", "-") and dns.startswith("clu-")
    hosts = [f"{dns}-{i}.{dns}" for i in range(4)]

    for row in rows:
        pod = read_existing("Pod", namespace, row.k8s_name)
        labels = pod["metadata"]["labels"]
        assert (labels["starverse.io/cluster"], labels["starverse.io/rank"]) == (
            dns,
            str(row.cluster_rank.index),
        )
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (
            f"{dns}-{row.cluster_rank.index}",
            dns,
        )
        env = _env(pod)
        lone = {e["name"] for e in manifests.init_env(row)}  # what a lone instance gets
        assert {k: v for k, v in env.items() if k not in lone} == {
            "STARVERSE_CLUSTER_ID": cluster.id,
            "MASTER_ADDR": hosts[0],
            "MASTER_PORT": "29500",
            "NODE_RANK": str(row.cluster_rank.index),
            "NNODES": "4",
            "NPROC_PER_NODE": "8",
            "WORLD_SIZE": "32",
            "PET_MASTER_ADDR": hosts[0],
            "PET_MASTER_PORT": "29500",
            "PET_NODE_RANK": str(row.cluster_rank.index),
            "PET_NNODES": "4",
            "PET_NPROC_PER_NODE": "8",
            "NCCL_IB_HCA": "mlx5",
            "NCCL_SOCKET_IFNAME": "eth0",
            "NCCL_IB_GID_INDEX": "3",
            "NCCL_NET_GDR_LEVEL": "PXB",
        }
        container = pod["spec"]["containers"][0]
        # the seeded H100 profile: one RDMA shared device, requested and granted (it runs)
        assert container["resources"]["limits"][RDMA] == "1"
        assert container["resources"]["requests"][RDMA] == "1"
        assert "hostNetwork" not in pod["spec"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        # the access Secret keeps its own mount; the files come by subPath beside it
        assert mounts["/etc/starverse/access"]["name"] == "access"
        assert "/etc/starverse" not in mounts
        for name in ("hostfile", "mpi_hostfile", "hosts", "launch"):
            assert mounts[f"/etc/starverse/{name}"]["subPath"] == name
        assert mounts["/etc/starverse/cluster-ssh"]["readOnly"] is True

    service = read_existing("Service", namespace, dns)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"starverse.io/cluster": dns}

    files = read_existing("ConfigMap", namespace, f"{dns}-files")["data"]
    assert files["hostfile"] == "".join(f"{host} slots=8\n" for host in hosts)
    assert files["mpi_hostfile"] == files["hostfile"]
    assert files["hosts"] == "".join(f"{host}\n" for host in hosts)
    assert (
        f"exec deepspeed --hostfile /etc/starverse/hostfile --master_addr {hosts[0]} "
        '--master_port 29500 "$@"\n'
    ) in files["launch-deepspeed.sh"]
    assert (
        f"--hostfile /etc/starverse/hosts --nproc_per_node 8 --master_addr {hosts[0]}"
        in (files["launch-colossalai.sh"])
    )
    assert "--nnodes=4 --nproc-per-node=8" in files["launch-torchrun.sh"]
    assert f"for host in {' '.join(hosts)}; do" in files["launch-torchrun.sh"]
    assert (
        "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 1"
        in files["launch-megatron.sh"]
    )

    secret = read_existing("Secret", namespace, f"{dns}-ssh")
    assert secret["metadata"]["labels"]["starverse.io/cluster"] == dns
    cluster.refresh_from_db()
    assert host_key_from_private(cluster.ssh_private_key).public_openssh.startswith("ssh-ed25519")

    body = client_for(user).get(f"/api/v1/clusters/{cluster.id}").json()
    assert [r["host"] for r in body["ranks"]] == hosts
    assert body["launch"] == {
        "deepspeed": "bash /etc/starverse/launch/deepspeed.sh train.py --deepspeed ds_config.json"
    }
    assert body["parallelism"] == {"tensor": 8, "pipeline": 1, "data": 4}


def test_the_shared_key_and_known_hosts_are_the_clusters_and_stay_in_its_tenant(fleet4):
    owner, other = make_user(), make_user()
    cluster = make_cluster(owner, node_count=2, template="torchrun")
    rows = _running(cluster)
    theirs = make_cluster(other, node_count=2, template="torchrun")
    other_rows = _running(theirs)
    dns, namespace = pods.cluster_dns(cluster.id), rows[0].k8s_namespace
    assert namespace != other_rows[0].k8s_namespace

    secret = kube.core().read_namespaced_secret(f"{dns}-ssh", namespace)
    data = {k: base64.b64decode(v).decode() for k, v in secret.data.items()}
    cluster.refresh_from_db()
    assert data["id_ed25519"] == cluster.ssh_private_key
    public = host_key_from_private(cluster.ssh_private_key).public_openssh
    assert data["id_ed25519.pub"] == f"{public} starverse-{dns}\n"
    # every rank's host key, under its DNS name and its short name
    assert data["known_hosts"] == "".join(
        f"{dns}-{row.cluster_rank.index}.{dns},{dns}-{row.cluster_rank.index} "
        f"{host_key_from_private(row.ssh_host_key).public_openssh}\n"
        for row in rows
    )
    assert f"Host {dns}-* *.{dns}\n" in data["ssh_config"]
    assert "StrictHostKeyChecking accept-new" in data["ssh_config"]
    # the other tenant's cluster has its own key, in its own namespace, and not this one
    theirs.refresh_from_db()
    assert theirs.ssh_private_key != cluster.ssh_private_key
    assert kube.read("Secret", other_rows[0].k8s_namespace, f"{dns}-ssh") is None
    other_dns = pods.cluster_dns(theirs.id)
    assert kube.read("Secret", namespace, f"{other_dns}-ssh") is None

    # the reconcile loop keeps a live cluster's shared objects
    reconcile()
    for kind, name in pods.object_names(cluster.id):
        assert kube.read(kind, namespace, name) is not None, (kind, name)
    # terminate: the last rank takes them with it
    for row in rows:
        Instance.objects.filter(pk=row.pk).update(status="terminating")
        assert converge_until(converge.terminate, row.id) == "terminated"
    for kind, name in pods.object_names(cluster.id):
        assert kube.read(kind, namespace, name) is None, (kind, name)
    assert kube.read("Secret", other_rows[0].k8s_namespace, f"{other_dns}-ssh") is not None


def test_a_node_profile_brings_networks_and_host_networking(fleet4):
    NodeProfile.objects.create(
        name="h100-hostnet",
        node_selector={
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "topology.starverse.io/fabric": "h100-ib",
        },
        rdma_resource=RDMA,
        rdma_count=2,
        networks="kube-system/ib-sriov",
        host_network=True,
        nccl_env={"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_DEBUG": "WARN"},
    )
    cluster = make_cluster(make_user(), node_count=2, template="none")
    rows = _running(cluster)
    for row in rows:
        pod = read_existing("Pod", row.k8s_namespace, row.k8s_name)
        assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == (
            "kube-system/ib-sriov"
        )
        assert (pod["spec"]["hostNetwork"], pod["spec"]["dnsPolicy"]) == (
            True,
            "ClusterFirstWithHostNet",
        )
        container = pod["spec"]["containers"][0]
        assert container["resources"]["limits"][RDMA] == "2"
        env = _env(pod)
        # the narrower profile wins: its NCCL settings, not the pool-wide one's
        assert (env["NCCL_IB_HCA"], env["NCCL_DEBUG"]) == ("mlx5_0,mlx5_1", "WARN")
        assert "NCCL_SOCKET_IFNAME" not in env
        # sshd moves off the node's port 22, and the SSH Service and ssh_config follow it
        assert env["STARVERSE_SSH_PORT"] == "2222"
        assert {p["name"]: p["containerPort"] for p in container["ports"]}["ssh"] == 2222
        service = read_existing("Service", row.k8s_namespace, row.k8s_name)
        assert service["spec"]["ports"][0]["targetPort"] == 2222
    dns = pods.cluster_dns(cluster.id)
    secret = kube.core().read_namespaced_secret(f"{dns}-ssh", rows[0].k8s_namespace)
    config = base64.b64decode(secret.data["ssh_config"]).decode()
    assert "    Port 2222\n" in config
    assert pods.launch_of(cluster) == {}  # template "none": no launch command


def test_megatron_degrees_are_checked_at_the_order_and_fill_the_script(fleet4, client_for):
    user = make_user()
    fund(user, 10_000_000)
    client = client_for(user)
    offering = Offering.objects.get(name=WHOLE_NODE)

    def order(parallelism: dict[str, int]) -> Any:
        return client.post(
            "/api/v1/clusters",
            {
                "offering": offering.id,
                "image": "pytorch-2.1",
                "node_count": 2,
                "template": "megatron",
                "parallelism": parallelism,
            },
            format="json",
        )

    before = Cluster.objects.count()
    refused = order({"tensor": 3})
    assert refused.status_code == 400
    assert refused.json()["code"] == "invalid_parallelism"
    assert refused.json()["detail"] == (
        "Tensor parallelism 3 does not divide the 8 GPUs of a node: choose a divisor of 8."
    )
    refused = order({"tensor": 8, "pipeline": 3})
    assert (refused.status_code, refused.json()["code"]) == (400, "invalid_parallelism")
    assert refused.json()["detail"] == (
        "Tensor × pipeline parallelism (24) does not divide the cluster's 16 GPUs: choose "
        "degrees whose product divides 16."
    )
    assert order({"tensor": 0}).status_code == 400
    assert Cluster.objects.count() == before

    ordered = order({"tensor": 4, "pipeline": 2})
    assert ordered.status_code == 202, ordered.content
    body = ordered.json()
    assert body["parallelism"] == {"tensor": 4, "pipeline": 2, "data": 2}
    assert body["launch"] == {
        "megatron": "bash /etc/starverse/launch/megatron.sh "
        "--data-path /nas/data/my-corpus_text_document"
    }
    cluster = Cluster.objects.get(pk=body["id"])
    assert (cluster.tensor_parallel, cluster.pipeline_parallel) == (4, 2)
    rows = _running(cluster)
    dns = pods.cluster_dns(cluster.id)
    script = read_existing("ConfigMap", rows[0].k8s_namespace, f"{dns}-files")["data"][
        "launch-megatron.sh"
    ]
    assert "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2" in script
