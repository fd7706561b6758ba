"""Kubernetes objects for an instance, as plain dicts: deterministic names from platform ids,
the managed-by label and the starverse.io labels on everything."""

import ipaddress
import re
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.urls import reverse

from compute.models import Holding
from instances.gateway import JUPYTER_PORT, SSH_PORT, route_hostname
from instances.mirrors import mirror_env
from instances.models import Instance, Workload
from starverse.core.hostkeys import HostKey
from starverse.core.kube import HTTP_ROUTE_API, MANAGED, id_label, namespace_name, tenant_label
from starverse.core.links import public_url
from storage.manifests import volumes_and_mounts
from storage.models import Disk, SharedStorage

# A catalog image's own entry point (docs/images.md, the image contract): tini as PID 1 (it
# reaps zombies and forwards SIGTERM) runs the platform's init package, which installs the
# access Secret mounted at ACCESS_DIR. The platform's pods run the init toolset's instead:
INIT_COMMAND = ["/usr/bin/tini", "--", "/opt/starverse/bin/starverse-init"]
# The init toolset (settings.INIT_IMAGE, deploy/init/Dockerfile): static tini and sshd, the
# init package and its entrypoint, copied by the pod's first init container into an emptyDir
# that every instance container has at TOOLS_DIR, so any image with a POSIX shell at /bin/sh
# runs as an instance without a rebuild. The entrypoint puts tini in as PID 1, starts sshd,
# Jupyter if the image has it and the environment, then runs the program given after `--`.
TOOLS_DIR = "/opt/starverse"
ENTRYPOINT = f"{TOOLS_DIR}/bin/entrypoint"
ENTRYPOINT_COMMAND = [ENTRYPOINT]
# the tools' init container mounts the emptyDir here (its own toolset is at TOOLS_DIR), and so
# does the system disk's seeding, so that what it copies of the image's /opt is the image's
TOOLS_STAGE = "/starverse-tools"
TOOLS_INSTALL_COMMAND = [f"{TOOLS_DIR}/bin/starverse-tools-install", TOOLS_STAGE]
TOOLS_CONTAINER = "starverse-init"
TOOLS_VOLUME = "starverse-tools"
# The entrypoint exits with this code, its reason in the termination log, when the image
# cannot run the init (instances.provisioning.converge reports it on the timeline).
ENTRYPOINT_REFUSED_EXIT = 78
ACCESS_DIR = "/etc/starverse/access"
CONTAINER = "main"  # the instance pod's one container (exec runs in it)
HOST_KEY_FILE = "ssh_host_ed25519_key"
DISK_MOUNT = "/root/data"
# On stop the init gives the user's on-stop hooks this long in all, then stops sshd and Jupyter;
# the kubelet waits that plus a margin before it kills what is left.
STOP_HOOKS_DEADLINE_S = 60
STOP_MARGIN_S = 30


def instance_name(instance_id: str) -> str:
    return f"inst-{instance_id.split('_', 1)[1].lower()}"


def disk_name(instance_id: str) -> str:
    return f"disk-{instance_id.split('_', 1)[1].lower()}"


def system_disk_name(instance_id: str) -> str:
    return f"sys-{instance_id.split('_', 1)[1].lower()}"


# The system disk (docs/operator-guide.md, "The system disk"): these directories of the root
# filesystem live on the instance's own volume, each a subPath mount, seeded from the image by
# an init container on the first start; the rest of the root filesystem is the image's.
SYSTEM_DIRS = ("usr", "etc", "opt", "root", "home", "var")
SYSTEM_SEED_MOUNT = "/starverse-system"
SEED_COMMAND = [f"{TOOLS_STAGE}/bin/starverse-seed-rootfs", SYSTEM_SEED_MOUNT, *SYSTEM_DIRS]


def labels(instance: Instance) -> dict[str, str]:
    return {
        **MANAGED,
        "starverse.io/tenant": tenant_label(instance.tenant_id),
        "starverse.io/instance": id_label(instance.id),
    }


METADATA_CIDR = "169.254.0.0/16"  # link-local: cloud metadata services, never for tenants

# A tenant pod runs as root with sshd, so it keeps only what that needs (capabilities are
# dropped to none, then these are added back; all are in the Pod Security "baseline" set):
CAPABILITIES = [
    "CHOWN",  # chown files in the image and on the tenant's disks (apt, pip, tar)
    "DAC_OVERRIDE",  # root reads and writes files it does not own (package managers)
    "FOWNER",  # chmod / utime on files of other owners (dpkg, tar, rsync)
    "SETUID",  # sshd and su/sudo switch to the logging-in user
    "SETGID",  # … and to that user's groups
    "KILL",  # signal processes of other users in the pod (sshd sessions, jobs)
    "NET_BIND_SERVICE",  # sshd listens on port 22
    "SYS_CHROOT",  # sshd's privilege-separation chroot
    "AUDIT_WRITE",  # sshd/PAM write login audit records (logins fail without it)
]


def egress_excluded() -> list[str]:
    """IPv4 ranges a tenant pod's internet egress leaves out: the metadata range, the
    cluster's pod and Service ranges, the API server and the nodes (their kubelets)."""
    ranges = [
        METADATA_CIDR,
        *settings.CLUSTER_POD_CIDR,
        *settings.CLUSTER_SERVICE_CIDR,
        *settings.KUBE_API_CIDR,
        *settings.CLUSTER_NODE_CIDR,
    ]
    seen: list[str] = []
    for cidr in ranges:
        network = ipaddress.ip_network(cidr, strict=False)
        if network.version == 4 and str(network) not in seen:
            seen.append(str(network))
    return seen


def network_policy(tenant_id: str, http_ports: list[int] | tuple[int, ...] = ()) -> dict[str, Any]:
    """Default-deny both ways, then: pods of a tenant talk to each other (multi-node jobs);
    SSH, Jupyter and the HTTP ports its instances declare (`http_ports`) come in only from the
    operator's GATEWAY_CIDR (the SSH NodePorts' nodes and the HTTPS gateway's proxy); out go
    DNS to kube-system and the internet, never the metadata range, the cluster's pods,
    Services, nodes or API server, so never another tenant."""
    ports = [
        {"port": port, "protocol": "TCP"}
        for port in [SSH_PORT, JUPYTER_PORT, *sorted(set(http_ports) - {SSH_PORT, JUPYTER_PORT})]
    ]
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": {}}]}]
    if settings.GATEWAY_CIDR:  # none set: nothing from outside the tenant (fail closed)
        ingress.append(
            {
                "from": [{"ipBlock": {"cidr": cidr}} for cidr in settings.GATEWAY_CIDR],
                "ports": ports,
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "tenant-isolation",
            "namespace": namespace_name(tenant_id),
            "labels": dict(MANAGED),
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": [
                {"to": [{"podSelector": {}}]},
                {
                    "to": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                            }
                        }
                    ],
                    "ports": [
                        {"port": 53, "protocol": "UDP"},
                        {"port": 53, "protocol": "TCP"},
                    ],
                },
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": egress_excluded()}}]},
            ],
        },
    }


# An inference endpoint's pods carry this label (endpoints.manifests), and serve on this port.
ENDPOINT_POD_LABEL = "starverse.io/endpoint"
ENDPOINT_PORT = 8000


def endpoint_network_policy(tenant_id: str) -> dict[str, Any]:
    """Beside the tenant's isolation (policies add up): the endpoints' pods, and only they,
    take their engine port from the gateway's and the KEDA interceptor's namespaces, which
    hold the requests of the endpoints' clients. Nothing else is opened."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "endpoint-ingress",
            "namespace": namespace_name(tenant_id),
            "labels": dict(MANAGED),
        },
        "spec": {
            "podSelector": {
                "matchExpressions": [{"key": ENDPOINT_POD_LABEL, "operator": "Exists"}]
            },
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": namespace}
                            }
                        }
                        for namespace in (
                            settings.ENDPOINT_GATEWAY_NAMESPACE,
                            settings.ENDPOINT_INTERCEPTOR_NAMESPACE,
                        )
                    ],
                    "ports": [{"port": ENDPOINT_PORT, "protocol": "TCP"}],
                }
            ],
        },
    }


def ssh_secret(
    instance: Instance, authorized_keys: str, jupyter_token: str, host_key: HostKey | None
) -> dict[str, Any]:
    """The per-instance access Secret, mounted at ACCESS_DIR: the public keys that may log in
    (the image's init follows changes to them), the Jupyter token and the SSH host key pair,
    which the init installs on the instance's disk (docs/images.md)."""
    data = {"authorized_keys": authorized_keys, "jupyter_token": jupyter_token}
    if host_key is not None:
        data[HOST_KEY_FILE] = host_key.private_openssh
        data[f"{HOST_KEY_FILE}.pub"] = host_key.public_openssh + "\n"
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": f"{instance_name(instance.id)}-access",
            "namespace": namespace_name(instance.tenant_id),
            "labels": labels(instance),
        },
        "stringData": data,
    }


def disk_claim(instance: Instance) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": disk_name(instance.id),
            "namespace": namespace_name(instance.tenant_id),
            "labels": labels(instance),
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{instance.offering.local_disk_gb}Gi"}},
            **(
                {"storageClassName": settings.INSTANCE_STORAGE_CLASS}
                if settings.INSTANCE_STORAGE_CLASS
                else {}
            ),
        },
    }


def system_disk_claim(instance: Instance) -> dict[str, Any]:
    """The instance's system disk: the offering's size, kept while it is stopped and on
    whichever node it starts next, deleted when it is terminated."""
    claim = disk_claim(instance)
    claim["metadata"]["name"] = system_disk_name(instance.id)
    claim["spec"]["resources"]["requests"]["storage"] = f"{instance.offering.system_disk_gb}Gi"
    return claim


SNAPSHOT_API = "snapshot.storage.k8s.io/v1"


def clone_sources(instance: Instance) -> list[tuple[str, str]]:
    """A clone's (claim, claim of its source it is restored from) pairs: its own disk and its
    system disk (instances.clones)."""
    source = instance.cloned_from
    return [
        (disk_name(instance.id), disk_name(source)),
        (system_disk_name(instance.id), system_disk_name(source)),
    ]


def clone_snapshot(instance: Instance, claim: str, source_claim: str) -> dict[str, Any]:
    """The CSI snapshot of one of the source's volumes that the clone's `claim` (its name is
    the snapshot's too) is restored from; crash-consistent when the source is running."""
    spec: dict[str, Any] = {"source": {"persistentVolumeClaimName": source_claim}}
    if settings.INSTANCE_SNAPSHOT_CLASS:
        spec["volumeSnapshotClassName"] = settings.INSTANCE_SNAPSHOT_CLASS
    return {
        "apiVersion": SNAPSHOT_API,
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": claim,
            "namespace": namespace_name(instance.tenant_id),
            "labels": labels(instance),
        },
        "spec": spec,
    }


def restored(claim: dict[str, Any]) -> dict[str, Any]:
    """A clone's claim, restored from its snapshot (named as the claim: clone_snapshot)."""
    claim["spec"]["dataSource"] = {
        "apiGroup": "snapshot.storage.k8s.io",
        "kind": "VolumeSnapshot",
        "name": claim["metadata"]["name"],
    }
    return claim


def pod(
    instance: Instance,
    node_name: str,
    disks: Sequence[Disk] = (),
    nas: SharedStorage | None = None,
) -> dict[str, Any]:
    """The instance's pod, pinned to its node: its GPUs and the rest of its offering, shared
    memory, its own disk, its cloud disks and NAS, the public pool read-only at /public, its
    access Secret, and no service-account token."""
    storage_volumes, storage_mounts = volumes_and_mounts(list(disks), nas)
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": instance_name(instance.id),
            "namespace": namespace_name(instance.tenant_id),
            "labels": labels(instance),
        },
        "spec": {
            "nodeName": node_name,
            "automountServiceAccountToken": False,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": STOP_HOOKS_DEADLINE_S + STOP_MARGIN_S,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            **(
                {"runtimeClassName": instance.offering.runtime_class}
                if instance.offering.runtime_class
                else {}
            ),
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            # a tenant's image from a private registry (instances.images.pull_secret)
            **(
                {"imagePullSecrets": [{"name": instance.image.pull_secret}]}
                if instance.image.pull_secret
                else {}
            ),
            "initContainers": [tools_container(), _seed_container(instance)],
            "containers": [_main_container(instance, storage_mounts)],
            "volumes": [*_volumes(instance), *storage_volumes],
        },
    }
    workload = workload_of(instance)
    return manifest if workload is None else _runs(manifest, workload)


# Every pod that runs a program to its end carries it (the quick check of their ends lists them).
WORKLOAD_LABEL = "starverse.io/workload"
# ... and, as an annotation (labels say whose it is: kube.ensure), the attempt it runs (its
# STARVERSE_RESTART_COUNT): a pod is for one attempt, so one of an earlier attempt found where
# the next is made is replaced (instances.provisioning.converge), as when a multi-node job's
# healthy rank starts its program again on its node.
ATTEMPT_ANNOTATION = "starverse.io/attempt"


def workload_of(instance: Instance) -> Workload | None:
    """The program the instance runs to its end, if it runs one (instances.models.Workload)."""
    try:
        return instance.workload
    except Workload.DoesNotExist:
        return None


def _runs(manifest: dict[str, Any], workload: Workload) -> dict[str, Any]:
    """The pod of an instance that runs a program to its end: the init runs it (`starverse-init
    -- PROGRAM`) and ends with its exit status, which the kubelet never restarts (the owner
    decides: instances.signals.workload_ended); the program's last lines are the container's
    termination message; its variables (STARVERSE_RESTART_COUNT: how many pods ran it before)
    and labels are added."""
    spec = manifest["spec"]
    spec["restartPolicy"] = "Never"
    meta = manifest["metadata"]
    meta["labels"].update({**workload.labels, WORKLOAD_LABEL: "true"})
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        ATTEMPT_ANNOTATION: str(workload.pods_made),
    }
    container = spec["containers"][0]
    container["args"] = ["--", *workload.argv]
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    added = {**workload.env, "STARVERSE_RESTART_COUNT": str(workload.pods_made)}
    kept = [item for item in container["env"] if item["name"] not in added]
    container["env"] = [*kept, *({"name": k, "value": str(v)} for k, v in added.items())]
    return manifest


def gpus_attached(instance: Instance) -> bool:
    """Whether the instance's pod gets its GPUs: not in no-GPU mode (instances.nogpu)."""
    try:
        return bool(instance.holding.gpus_attached)
    except Holding.DoesNotExist:  # an instance made without the compute core (a test's row)
        return True


# No-GPU mode's pod asks for no GPU, and a GPU node's NVIDIA container runtime exposes none to
# it: the value the runtime reads as "no devices" (CUDA images set `all` by default, which
# would otherwise show a GPU node's every GPU to a pod that asked for none).
NO_GPU_ENV = {"NVIDIA_VISIBLE_DEVICES": "void"}


def _security_context(*added: str) -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "seccompProfile": {"type": "RuntimeDefault"},
        "capabilities": {"drop": ["ALL"], "add": [*CAPABILITIES, *added]},
    }


def tools_container() -> dict[str, Any]:
    """The pod's first init container: the platform's INIT_IMAGE copies its toolset into the
    TOOLS_VOLUME emptyDir, which the containers after it mount (read-only) at TOOLS_DIR. Root
    with the instance container's capabilities (it writes a volume the tenant's image reads)."""
    resources = {"cpu": "500m", "memory": "128Mi"}
    return {
        "name": TOOLS_CONTAINER,
        "image": settings.INIT_IMAGE,
        "command": list(TOOLS_INSTALL_COMMAND),
        "resources": {"limits": resources, "requests": dict(resources)},
        "securityContext": _security_context(),
        "volumeMounts": [{"name": TOOLS_VOLUME, "mountPath": TOOLS_STAGE}],
    }


def tools_mount(path: str = TOOLS_DIR) -> dict[str, Any]:
    """The toolset's emptyDir in a container after the tools' init container, read-only."""
    return {"name": TOOLS_VOLUME, "mountPath": path, "readOnly": True}


def tools_volume() -> dict[str, Any]:
    return {"name": TOOLS_VOLUME, "emptyDir": {"sizeLimit": "512Mi"}}


def _seed_container(instance: Instance) -> dict[str, Any]:
    """Copies the image's SYSTEM_DIRS to the system disk on its first start (a directory seeded
    once is never copied again: what the tenant installed stays). Root with the main
    container's capabilities and FSETID, so that set-group-ID programs keep their bit."""
    resources = {"cpu": "1", "memory": "512Mi"}
    return {
        "name": "system-disk",
        "image": instance.image.container_image,
        "command": list(SEED_COMMAND),
        "resources": {"limits": resources, "requests": dict(resources)},
        "securityContext": _security_context("FSETID"),
        "volumeMounts": [
            {"name": "system", "mountPath": SYSTEM_SEED_MOUNT},
            tools_mount(TOOLS_STAGE),
        ],
    }


def _main_container(instance: Instance, storage_mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """The instance's container: its offering's GPUs (none in no-GPU mode, where the NVIDIA
    runtime is told to expose none), CPU and memory, its ports, the init's variables, and
    its mounts."""
    offering = instance.offering
    attached = gpus_attached(instance)
    resources = {
        **({"nvidia.com/gpu": str(offering.gpu_count)} if attached else {}),
        "cpu": str(offering.cpu_cores),
        "memory": f"{offering.memory_gb}Gi",
        "ephemeral-storage": f"{settings.INSTANCE_EPHEMERAL_STORAGE_GB}Gi",
    }
    env = init_env(instance)
    if not attached:
        env += [{"name": key, "value": value} for key, value in NO_GPU_ENV.items()]
    return {
        "name": CONTAINER,
        "image": instance.image.container_image,
        "command": list(ENTRYPOINT_COMMAND),
        "ports": [
            {"name": "ssh", "containerPort": SSH_PORT},
            {"name": "jupyter", "containerPort": JUPYTER_PORT},
        ],
        "env": env,
        "resources": {"limits": resources, "requests": dict(resources)},
        "securityContext": _security_context(),
        "volumeMounts": [
            *({"name": "system", "mountPath": f"/{d}", "subPath": d} for d in SYSTEM_DIRS),
            tools_mount(),  # over the system disk's /opt: the toolset of this start
            {"name": "shm", "mountPath": "/dev/shm"},  # noqa: S108 - in the pod
            {"name": "disk", "mountPath": DISK_MOUNT},
            {"name": "access", "mountPath": ACCESS_DIR, "readOnly": True},
            {"name": "public", "mountPath": "/public/data", "subPath": "data", "readOnly": True},
            {
                "name": "public",
                "mountPath": "/public/models",
                "subPath": "models",
                "readOnly": True,
            },
            *storage_mounts,
        ],
    }


def jupyter_base_url(instance: Any) -> str:
    """The path JupyterLab serves under in the instance (its links are made relative to it)."""
    return "/"


def init_env(instance: Any) -> list[dict[str, Any]]:
    """What the image's init reads (docs/images.md). SSH sessions see the STARVERSE_ ones too;
    the Jupyter token is not among them: the init reads it from the mounted Secret."""
    values = {
        "STARVERSE_INSTANCE_ID": instance.id,
        "STARVERSE_CONSOLE_URL": public_url("/"),
        "STARVERSE_BALANCE_URL": public_url(reverse("billing:billing")),
        "STARVERSE_ACCESS_DIR": ACCESS_DIR,
        "STARVERSE_DISK": DISK_MOUNT,
        "STARVERSE_JUPYTER_PORT": str(JUPYTER_PORT),
        "STARVERSE_JUPYTER_BASE_URL": jupyter_base_url(instance),
        "STARVERSE_STOP_DEADLINE_S": str(STOP_HOOKS_DEADLINE_S),
        # the operator's mirrors, unless the user turned them off for this instance
        **(mirror_env() if getattr(instance, "mirrors", True) else {}),
    }
    return [{"name": key, "value": value} for key, value in values.items()]


def _volumes(instance: Any) -> list[dict[str, Any]]:
    """Shared memory (half the instance's memory), its own disk and system disk, its access
    Secret, the public pool and the init toolset's emptyDir."""
    name = instance_name(instance.id)
    return [
        {
            "name": "shm",
            "emptyDir": {
                "medium": "Memory",
                "sizeLimit": f"{max(1, instance.offering.memory_gb // 2)}Gi",
            },
        },
        {"name": "disk", "persistentVolumeClaim": {"claimName": disk_name(instance.id)}},
        {
            "name": "system",
            "persistentVolumeClaim": {"claimName": system_disk_name(instance.id)},
        },
        {"name": "access", "secret": {"secretName": f"{name}-access", "defaultMode": 0o400}},
        {"name": "public", **public_pool_volume()},
        tools_volume(),
    ]


def public_pool_volume() -> dict[str, Any]:
    """The public datasets and models pool from the operator-configured source, read-only at
    the volume as well as at each mount: an inline NFS export, the tenant namespace's own
    ReadOnlyMany claim, or (development only) a host directory, whose volume has no read-only
    switch of its own, so only its mounts are."""
    scheme, _sep, rest = settings.PUBLIC_POOL_SOURCE.partition("://")
    if scheme == "nfs":
        server, _slash, path = rest.partition("/")
        return {"nfs": {"server": server, "path": "/" + path, "readOnly": True}}
    if scheme == "pvc":
        return {"persistentVolumeClaim": {"claimName": rest, "readOnly": True}}
    return {"hostPath": {"path": rest, "type": "Directory"}}


# A pvc:// pool's claims all reach one share that the StorageClass's provisioner does not size.
PUBLIC_POOL_CLAIM_SIZE = "1Gi"


def public_pool_claim(tenant_id: str) -> dict[str, Any] | None:
    """With a pvc:// pool, the claim the tenant's namespace needs (a claim is namespaced, and a
    volume binds one claim only): ReadOnlyMany, from PUBLIC_POOL_STORAGE_CLASS, whose
    provisioner maps every claim onto the same share (docs/operator-guide.md, the public pool).
    None otherwise."""
    scheme, _sep, name = settings.PUBLIC_POOL_SOURCE.partition("://")
    if scheme != "pvc":
        return None
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace_name(tenant_id),
            "labels": {**MANAGED, "starverse.io/tenant": tenant_label(tenant_id)},
        },
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": settings.PUBLIC_POOL_STORAGE_CLASS,
            "resources": {"requests": {"storage": PUBLIC_POOL_CLAIM_SIZE}},
        },
    }


def service(instance: Any) -> dict[str, Any]:
    """SSH on a NodePort. Nothing else of the pod is published on the nodes: its HTTP ports
    (Jupyter's included) are reached only through the gateway (port_service, http_route)."""
    name = instance_name(instance.id)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace_name(instance.tenant_id),
            "labels": labels(instance),
        },
        "spec": {
            "type": "NodePort",
            "selector": {"starverse.io/instance": labels(instance)["starverse.io/instance"]},
            "ports": [{"name": "ssh", "port": SSH_PORT, "targetPort": SSH_PORT}],
        },
    }


PORT_LABEL = "starverse.io/port"
_PORT_OBJECT = re.compile(r"^(inst-[a-z0-9]+)-p([0-9]{1,5})$")


def port_object_name(instance_id: str, port: int) -> str:
    """The name of the Service and the HTTPRoute of one served port."""
    return f"{instance_name(instance_id)}-p{port}"


def port_object_parse(name: str) -> tuple[str, int] | None:
    """(instance object name, port) of a port's Service or HTTPRoute name, else None."""
    found = _PORT_OBJECT.match(name)
    return (found.group(1), int(found.group(2))) if found else None


def port_selector(instance: Any) -> str:
    """The label selector of the instance's port Services and HTTPRoutes."""
    return f"starverse.io/instance={labels(instance)['starverse.io/instance']},{PORT_LABEL}"


def port_service(instance: Any, port: int) -> dict[str, Any]:
    """One served port of the pod inside the cluster (ClusterIP): the gateway's backend. One
    Service per port, so that a port added or removed is one object made or deleted, and
    the others never change."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": port_object_name(instance.id, port),
            "namespace": namespace_name(instance.tenant_id),
            "labels": {**labels(instance), PORT_LABEL: str(port)},
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {"starverse.io/instance": labels(instance)["starverse.io/instance"]},
            "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def http_route(instance: Any, port: int) -> dict[str, Any]:
    """The gateway's route from the port's address to its Service (Gateway API), attached to
    the platform's Gateway (GATEWAY_ROUTE_PARENT, deploy/k8s/gateway.yaml), whose proxy asks
    the console's authorization check first."""
    parent_namespace, _sep, parent = settings.GATEWAY_ROUTE_PARENT.partition("/")
    name = port_object_name(instance.id, port)
    return {
        "apiVersion": HTTP_ROUTE_API,
        "kind": "HTTPRoute",
        "metadata": {
            "name": name,
            "namespace": namespace_name(instance.tenant_id),
            "labels": {**labels(instance), PORT_LABEL: str(port)},
        },
        "spec": {
            "parentRefs": [{"name": parent, "namespace": parent_namespace}],
            "hostnames": [route_hostname(instance.id, port)],
            "rules": [{"backendRefs": [{"name": name, "port": port}]}],
        },
    }
