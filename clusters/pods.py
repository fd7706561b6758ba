"""Kubernetes objects of a multi-node cluster's ranks, as plain dicts (the ranks are instances;
this adds what makes them one cluster, through the instances app's gang hooks: clusters.ranks).
Each rank's pod gets the cluster and rank labels, a stable DNS name through one headless Service
per cluster (rank i is `<dns>-<i>.<dns>` on every node, whatever node it runs on), the
cluster's shared SSH key pair (one Secret), the node profile's RDMA resource, networks and NCCL
settings, the launcher environment, and the cluster's files (hostfiles, launch scripts; one
ConfigMap) under /etc/starverse.

Everything here is derived from the database (the cluster row, its ranks' rows, the node's
profile), so each object renders the same on every pass and from every rank: the rank that
comes up first makes the shared ones, the others find them (kube.ensure)."""

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from clusters.gates import gate_apply
from clusters.models import Cluster, Rank
from fleet.models import MULTUS_NETWORKS, NodeProfile
from instances.gateway import SSH_PORT
from instances.provisioning.manifests import WORKLOAD_LABEL
from starverse.core.hostkeys import host_key_from_private
from starverse.core.kube import MANAGED, id_label, namespace_name, tenant_label

CLUSTER_LABEL = "starverse.io/cluster"
RANK_LABEL = "starverse.io/rank"
MASTER_PORT = 29500
FILES_DIR = "/etc/starverse"
HOSTFILE = f"{FILES_DIR}/hostfile"
MPI_HOSTFILE = f"{FILES_DIR}/mpi_hostfile"
HOSTS = f"{FILES_DIR}/hosts"
LAUNCH_DIR = f"{FILES_DIR}/launch"
# The shared key pair; beside the access Secret, never over it (docs/user-guide.md, clusters).
CLUSTER_SSH_DIR = f"{FILES_DIR}/cluster-ssh"
# A rank on the node's network cannot take port 22 (the node's own sshd has it).
HOST_NETWORK_SSH_PORT = 2222
LAUNCHERS = ("torchrun", "deepspeed", "megatron", "colossalai")


def cluster_dns(cluster_id: str) -> str:
    """The cluster's id as a DNS label (clu_ABC → clu-abc): its Service's name."""
    return id_label(cluster_id)


def rank_host(cluster_id: str, rank: int) -> str:
    """Rank `rank`'s stable name, resolvable from every rank of the cluster."""
    dns = cluster_dns(cluster_id)
    return f"{dns}-{rank}.{dns}"


def ssh_secret_name(cluster_id: str) -> str:
    return f"{cluster_dns(cluster_id)}-ssh"


def files_name(cluster_id: str) -> str:
    return f"{cluster_dns(cluster_id)}-files"


def object_names(cluster_id: str) -> list[tuple[str, str]]:
    """(kind, name) of the objects the cluster's ranks share."""
    return [
        ("Service", cluster_dns(cluster_id)),
        ("Secret", ssh_secret_name(cluster_id)),
        ("ConfigMap", files_name(cluster_id)),
    ]


@dataclass(frozen=True)
class Layout:
    """Where a cluster's ranks are and how a launcher splits its GPUs among them."""

    cluster_id: str
    node_count: int
    gpus_per_node: int
    template: str
    tensor: int | None = None
    pipeline: int | None = None
    ssh_port: int = SSH_PORT

    @property
    def dns(self) -> str:
        return cluster_dns(self.cluster_id)

    @property
    def hosts(self) -> list[str]:
        return [rank_host(self.cluster_id, rank) for rank in range(self.node_count)]

    @property
    def master_addr(self) -> str:
        return rank_host(self.cluster_id, 0)

    @property
    def world_size(self) -> int:
        return self.node_count * self.gpus_per_node

    def degrees(self) -> tuple[int, int, int]:
        """(tensor, pipeline, data) parallel degrees: the cluster's chosen ones, else tensor
        parallel inside a node (over NVLink), no pipeline, data parallel across nodes."""
        tensor = self.tensor or self.gpus_per_node
        pipeline = self.pipeline or 1
        return tensor, pipeline, self.world_size // (tensor * pipeline)


def layout_of(cluster: Cluster, profile: NodeProfile | None = None) -> Layout:
    return Layout(
        cluster_id=cluster.id,
        node_count=cluster.node_count,
        gpus_per_node=cluster.offering.gpu_count,
        template=cluster.template,
        tensor=cluster.tensor_parallel,
        pipeline=cluster.pipeline_parallel,
        ssh_port=HOST_NETWORK_SSH_PORT if profile and profile.host_network else SSH_PORT,
    )


def launch_commands(layout: Layout) -> dict[str, str]:
    """What a user runs, from any rank in the directory of their script, to start the
    template's launcher on every rank (the scripts are in LAUNCH_DIR); none for `none`."""
    if layout.template not in LAUNCHERS:
        return {}
    example = {
        "torchrun": "train.py",
        "deepspeed": "train.py --deepspeed ds_config.json",
        "megatron": "--data-path /nas/data/my-corpus_text_document",
        "colossalai": "train.py",
    }[layout.template]
    return {layout.template: f"bash {LAUNCH_DIR}/{layout.template}.sh {example}"}


# --- the files ----------------------------------------------------------------------------------


def hostfile(layout: Layout) -> str:
    """DeepSpeed's hostfile (and OpenMPI's, which reads the same `host slots=n` lines)."""
    return "".join(f"{host} slots={layout.gpus_per_node}\n" for host in layout.hosts)


def hosts_file(layout: Layout) -> str:
    """One host a line (Colossal-AI's --hostfile, pdsh's -w ^file)."""
    return "".join(f"{host}\n" for host in layout.hosts)


def _fan_out(layout: Layout, name: str, local: str) -> str:
    """A script that runs `local` on every rank over SSH from the current directory (the
    same path on every node: the NAS or the image), and fails if any rank fails."""
    hosts = " ".join(layout.hosts)
    return (
        "#!/bin/bash\n"
        f"# Written by Starverse for cluster {layout.cluster_id}: starts {name} on every rank.\n"
        "# Run it on any rank from your script's directory (the NAS is the same on all).\n"
        "set -euo pipefail\n"
        'if [ -n "${STARVERSE_LAUNCH_LOCAL:-}" ]; then\n'
        f"  exec {local}\n"
        "fi\n"
        "args=$(printf '%q ' \"$@\")\n"
        "here=$(printf '%q' \"$PWD\")\n"
        "pids=()\n"
        f"for host in {hosts}; do\n"
        '  ssh -o BatchMode=yes "$host" '
        f'"cd $here && STARVERSE_LAUNCH_LOCAL=1 bash {LAUNCH_DIR}/{name}.sh $args" &\n'
        "  pids+=($!)\n"
        "done\n"
        "status=0\n"
        'for pid in "${pids[@]}"; do wait "$pid" || status=$?; done\n'
        'exit "$status"\n'
    )


def _torchrun(layout: Layout, program: str = "") -> str:
    return (
        f"torchrun --nnodes={layout.node_count} --nproc-per-node={layout.gpus_per_node} "
        f'--node-rank="$NODE_RANK" --master-addr={layout.master_addr} '
        f'--master-port={MASTER_PORT} {program}"$@"'
    )


def launch_scripts(layout: Layout) -> dict[str, str]:
    """The four launchers, whatever the template (an image may carry several): torchrun and
    Megatron-LM started on every rank over SSH; DeepSpeed and Colossal-AI, which reach the
    ranks over SSH themselves, from the hostfiles."""
    tensor, pipeline, _data = layout.degrees()
    head = (
        f"#!/bin/bash\n# Written by Starverse for cluster {layout.cluster_id}.\nset -euo pipefail\n"
    )
    megatron = _torchrun(
        layout,
        "${MEGATRON_DIR:-/opt/Megatron-LM}/pretrain_gpt.py "
        f"--tensor-model-parallel-size {tensor} --pipeline-model-parallel-size {pipeline} ",
    )
    return {
        "torchrun.sh": _fan_out(layout, "torchrun", _torchrun(layout)),
        "megatron.sh": _fan_out(layout, "megatron", megatron),
        "deepspeed.sh": head
        + f"exec deepspeed --hostfile {HOSTFILE} --master_addr {layout.master_addr} "
        f'--master_port {MASTER_PORT} "$@"\n',
        "colossalai.sh": head
        + f"exec colossalai run --hostfile {HOSTS} --nproc_per_node {layout.gpus_per_node} "
        f'--master_addr {layout.master_addr} --master_port {MASTER_PORT} "$@"\n',
    }


# A job's checkpoint directory, as every rank's environment has it (jobs.services._workload).
CHECKPOINT_VAR = '"$STARVERSE_CHECKPOINT_DIR"'


def job_launch_line(template: str, command: str) -> str:
    """What each rank of a multi-node job runs for a template (its launcher started on this
    rank, from the environment rank_env sets: NODE_RANK, MASTER_ADDR, NNODES and the rest),
    with the framework's own resume flags added after the user's command, so that a job
    started again resumes from its last checkpoint: Megatron-LM's `--load`/`--save`, and the
    checkpoint directory (`--checkpoint-dir`) for a torchrun, DeepSpeed or Colossal-AI script."""
    torchrun = (
        'torchrun --nnodes="$NNODES" --nproc-per-node="$NPROC_PER_NODE" '
        '--node-rank="$NODE_RANK" --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT"'
    )
    resume = f"--checkpoint-dir {CHECKPOINT_VAR}"
    if template == "deepspeed":
        # every rank starts its own launcher (no SSH fan-out: the platform starts each rank)
        return (
            f'deepspeed --no_ssh --node_rank="$NODE_RANK" --hostfile {HOSTFILE} '
            f'--master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" {command} {resume}'
        )
    if template == "megatron":
        return (
            f"{torchrun} ${{MEGATRON_DIR:-/opt/Megatron-LM}}/pretrain_gpt.py "
            '--tensor-model-parallel-size "${TENSOR_PARALLEL:-$NPROC_PER_NODE}" '
            '--pipeline-model-parallel-size "${PIPELINE_PARALLEL:-1}" '
            f"{command} --load {CHECKPOINT_VAR} --save {CHECKPOINT_VAR}"
        )
    if template in ("torchrun", "colossalai"):
        # Colossal-AI's own launcher is torchrun underneath (`colossalai run` adds SSH)
        return f"{torchrun} {command} {resume}"
    return command


def files_config_map(member: Rank, layout: Layout) -> dict[str, Any]:
    scripts = launch_scripts(layout)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": files_name(layout.cluster_id),
            "namespace": namespace_name(member.cluster.tenant_id),
            "labels": cluster_labels(member),
        },
        "data": {
            "hostfile": hostfile(layout),
            "mpi_hostfile": hostfile(layout),
            "hosts": hosts_file(layout),
            **{f"launch-{name}": text for name, text in scripts.items()},
        },
    }


# --- the shared objects -------------------------------------------------------------------------


def cluster_labels(member: Rank) -> dict[str, str]:
    return {
        **MANAGED,
        "starverse.io/tenant": tenant_label(member.cluster.tenant_id),
        CLUSTER_LABEL: cluster_dns(member.cluster_id),
    }


def rank_labels(member: Rank) -> dict[str, str]:
    return {CLUSTER_LABEL: cluster_dns(member.cluster_id), RANK_LABEL: str(member.index)}


def headless_service(member: Rank) -> dict[str, Any]:
    """The cluster's headless Service: a DNS record per rank pod (hostname.subdomain), ready
    or not, so ranks find each other while they all come up."""
    dns = cluster_dns(member.cluster_id)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": dns,
            "namespace": namespace_name(member.cluster.tenant_id),
            "labels": cluster_labels(member),
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {CLUSTER_LABEL: dns},
            "ports": [{"name": "ssh", "port": SSH_PORT, "targetPort": "ssh"}],
        },
    }


def ssh_key_secret(
    member: Rank, private_openssh: str, known_hosts: str, layout: Layout
) -> dict[str, Any]:
    """The cluster's SSH key pair (every rank logs in to every other with it), the ranks' host
    keys as known_hosts, and the ssh_config lines for the cluster's hosts; the image's init
    installs them for root."""
    key = host_key_from_private(private_openssh)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": ssh_secret_name(layout.cluster_id),
            "namespace": namespace_name(member.cluster.tenant_id),
            "labels": cluster_labels(member),
        },
        "stringData": {
            "id_ed25519": private_openssh,
            "id_ed25519.pub": key.public_openssh + f" starverse-{layout.dns}\n",
            "known_hosts": known_hosts,
            "ssh_config": ssh_config(layout),
        },
    }


def ssh_config(layout: Layout) -> str:
    """Root's ssh_config for the cluster's hosts: its key, its port, the ranks' host keys
    known (accept-new only for another name of them, never a changed key)."""
    return (
        f"Host {layout.dns}-* *.{layout.dns}\n"
        f"    User root\n"
        f"    Port {layout.ssh_port}\n"
        f"    IdentityFile ~/.ssh/id_ed25519\n"
        f"    UserKnownHostsFile ~/.ssh/known_hosts {CLUSTER_SSH_DIR}/known_hosts\n"
        f"    StrictHostKeyChecking accept-new\n"
        f"    BatchMode yes\n"
        f"    LogLevel ERROR\n"
    )


@dataclass(frozen=True, slots=True)
class RankHost:
    """What the shared objects need of a rank: its number, its instance and that instance's
    host key ("" until one is assigned)."""

    index: int
    instance_id: str
    ssh_host_key: str


def known_hosts(ranks: list[RankHost], layout: Layout) -> str:
    lines = []
    for rank in ranks:
        if not rank.ssh_host_key:
            continue
        host = rank_host(layout.cluster_id, rank.index)
        names = [host, host.split(".", 1)[0]]
        if layout.ssh_port != 22:
            names = [f"[{name}]:{layout.ssh_port}" for name in names]
        lines.append(f"{','.join(names)} {host_key_from_private(rank.ssh_host_key).public_openssh}")
    return "".join(f"{line}\n" for line in lines)


def cluster_ranks(cluster_id: str) -> list[RankHost]:
    """The cluster's ranks now (not those scaled away: their number is null), in rank order,
    each with its instance's host key: all the shared objects need of them. Every rank of a
    128-node start reads all 128, so they come as plain tuples, not model rows."""
    rows = (
        Rank.objects.filter(cluster_id=cluster_id, index__isnull=False)
        .order_by("index")
        .values_list("index", "instance_id", "instance__ssh_host_key")
    )
    return [RankHost(index or 0, instance_id, key) for index, instance_id, key in rows]


# --- the rank's pod -----------------------------------------------------------------------------


def rank_env(member: Rank, layout: Layout, profile: NodeProfile | None) -> list[dict[str, str]]:
    """The launchers' environment: torchrun's (and its PET_* twins), DeepSpeed's and
    Megatron's, the cluster's id and the node profile's NCCL settings."""
    values = {
        "STARVERSE_CLUSTER_ID": layout.cluster_id,
        "MASTER_ADDR": layout.master_addr,
        "MASTER_PORT": str(MASTER_PORT),
        "NODE_RANK": str(member.index),
        "NNODES": str(layout.node_count),
        "NPROC_PER_NODE": str(layout.gpus_per_node),
        "WORLD_SIZE": str(layout.world_size),
        "PET_MASTER_ADDR": layout.master_addr,
        "PET_MASTER_PORT": str(MASTER_PORT),
        "PET_NODE_RANK": str(member.index),
        "PET_NNODES": str(layout.node_count),
        "PET_NPROC_PER_NODE": str(layout.gpus_per_node),
    }
    if layout.ssh_port != SSH_PORT:
        values["STARVERSE_SSH_PORT"] = str(layout.ssh_port)
    for key, value in sorted((profile.nccl_env if profile else {}).items()):
        values.setdefault(key, str(value))
    return [{"name": key, "value": value} for key, value in values.items()]


def rank_pod(pod: dict[str, Any], member: Rank, profile: NodeProfile | None) -> dict[str, Any]:
    """The instance's pod (manifests.pod) as a rank: labels, DNS name, the shared key and
    files mounted, the environment, and its node's profile's (node_profile_for) resources,
    networks and host networking."""
    layout = layout_of(member.cluster, profile)
    meta, spec = pod["metadata"], pod["spec"]
    meta["labels"] = {**meta["labels"], **rank_labels(member)}
    spec["hostname"] = f"{layout.dns}-{member.index}"
    spec["subdomain"] = layout.dns
    container = spec["containers"][0]
    container["env"] = [*container["env"], *rank_env(member, layout, profile)]
    spec["volumes"] = [
        *spec["volumes"],
        {
            "name": "cluster-ssh",
            "secret": {"secretName": ssh_secret_name(layout.cluster_id), "defaultMode": 0o400},
        },
        {
            "name": "cluster-files",
            "configMap": {
                "name": files_name(layout.cluster_id),
                "items": [
                    {"key": "hostfile", "path": "hostfile", "mode": 0o644},
                    {"key": "mpi_hostfile", "path": "mpi_hostfile", "mode": 0o644},
                    {"key": "hosts", "path": "hosts", "mode": 0o644},
                    *(
                        {"key": f"launch-{name}", "path": f"launch/{name}", "mode": 0o755}
                        for name in sorted(launch_scripts(layout))
                    ),
                ],
            },
        },
    ]
    # Files by subPath, the launch folder as one: a volume at /etc/starverse itself would
    # hide the access Secret's mount below it and the init's own files there.
    container["volumeMounts"] = [
        *container["volumeMounts"],
        {"name": "cluster-ssh", "mountPath": CLUSTER_SSH_DIR, "readOnly": True},
        *(
            {
                "name": "cluster-files",
                "mountPath": f"{FILES_DIR}/{name}",
                "subPath": name,
                "readOnly": True,
            }
            for name in ("hostfile", "mpi_hostfile", "hosts", "launch")
        ),
    ]
    if profile is not None:
        _profile_apply(pod, container, profile, layout)
    if meta["labels"].get(WORKLOAD_LABEL):
        gate_apply(pod)  # its program waits for the pre-flight check (clusters.gates)
    return pod


def _profile_apply(
    pod: dict[str, Any], container: dict[str, Any], profile: NodeProfile, layout: Layout
) -> None:
    spec = pod["spec"]
    if profile.rdma_resource:
        for kind in ("limits", "requests"):
            container["resources"][kind][profile.rdma_resource] = str(profile.rdma_count)
    if profile.networks:
        pod["metadata"]["annotations"] = {
            **(pod["metadata"].get("annotations") or {}),
            MULTUS_NETWORKS: profile.networks,
        }
    if profile.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
        for port in container["ports"]:
            if port["name"] == "ssh":
                port["containerPort"] = layout.ssh_port


def rank_service(service: dict[str, Any], profile: NodeProfile | None) -> dict[str, Any]:
    """The rank's SSH Service (manifests.service), aimed at its sshd's port on the node's
    network when its node's profile puts it there."""
    if profile is not None and profile.host_network:
        for port in service["spec"]["ports"]:
            if port["name"] == "ssh":
                port["targetPort"] = HOST_NETWORK_SSH_PORT
    return service


def shared_objects(
    member: Rank, profile: NodeProfile | None, private_key: str, ranks: list[RankHost]
) -> list[dict[str, Any]]:
    """The headless Service, the key Secret (`private_key`, the `ranks`' host keys) and the
    files ConfigMap of the rank's cluster, its node's profile being `profile`."""
    layout = layout_of(member.cluster, profile)
    return [
        headless_service(member),
        ssh_key_secret(member, private_key, known_hosts(ranks, layout), layout),
        files_config_map(member, layout),
    ]


def objects_fingerprint(shared: list[dict[str, Any]], tenant_fingerprint: str) -> str:
    """A digest of the cluster's shared objects as rendered (shared_objects) and of its
    tenant's namespace objects (`tenant_fingerprint`): equal digests, the same objects."""
    rendered = json.dumps([tenant_fingerprint, shared], sort_keys=True, default=str)
    return hashlib.sha256(rendered.encode()).hexdigest()[:32]


def launch_of(cluster: Cluster) -> dict[str, str]:
    """The API's `launch` of a cluster."""
    return launch_commands(layout_of(cluster))
