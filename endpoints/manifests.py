"""An endpoint's Kubernetes objects as plain dicts: the snapshot of its source and the
read-only claim made from it, its Deployment (pods left to the platform's own scheduler), its
Service, the KEDA HTTP add-on's HTTPScaledObject and the gateway's HTTPRoute. Names derive
from the endpoint's id (`ep-<id>`), the snapshot's and claim's from its generation too, so an
update makes new ones beside the old."""

from typing import Any

from django.conf import settings

from endpoints.choices import EndpointStatus, SourceKind
from endpoints.engines import ENGINE_PORT, MODEL_DIR, engine_args, engine_image
from endpoints.models import Endpoint
from instances.provisioning.manifests import ENDPOINT_POD_LABEL, public_pool_volume
from starverse.core.kube import HTTP_ROUTE_API, MANAGED, namespace_name, tenant_label

SCHEDULER_NAME = "starverse-endpoints"
ENDPOINT_LABEL = ENDPOINT_POD_LABEL  # the tenant's endpoint-ingress policy selects it
GENERATION_LABEL = "starverse.io/generation"
SNAPSHOT_API = "snapshot.storage.k8s.io/v1"
SCALED_OBJECT_API = "http.keda.sh/v1alpha1"
# The engine images' entry point (deploy/images/init/bin/starverse-serve): it checks /model
# and execs the engine's command, given as the container's args.
SERVE_COMMAND = ["/usr/bin/tini", "--", "/opt/starverse/bin/starverse-serve"]


def object_name(endpoint_id: str) -> str:
    return f"ep-{endpoint_id.split('_', 1)[1].lower()}"


def snapshot_name(endpoint_id: str, generation: int) -> str:
    return f"{object_name(endpoint_id)}-g{generation}"


def host_label(endpoint_id: str) -> str:
    return object_name(endpoint_id)


def endpoint_host(endpoint_id: str) -> str:
    """The endpoint's host as clients send it (with GATEWAY_DOMAIN's port, in development)."""
    return f"{host_label(endpoint_id)}.{settings.GATEWAY_DOMAIN}"


def route_hostname(endpoint_id: str) -> str:
    return endpoint_host(endpoint_id).split(":")[0]


def endpoint_url(endpoint_id: str) -> str:
    """The OpenAI-compatible base URL: clients add /chat/completions and so on."""
    return f"{settings.GATEWAY_SCHEME}://{endpoint_host(endpoint_id)}/v1"


def labels(endpoint: Endpoint) -> dict[str, str]:
    return {
        **MANAGED,
        "starverse.io/tenant": tenant_label(endpoint.tenant_id),
        ENDPOINT_LABEL: object_name(endpoint.id),
    }


def selector(endpoint: Endpoint) -> str:
    return f"{ENDPOINT_LABEL}={object_name(endpoint.id)}"


def _meta(endpoint: Endpoint, name: str, **extra: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace_name(endpoint.tenant_id),
        "labels": {**labels(endpoint), **extra},
    }


def volume_snapshot(endpoint: Endpoint) -> dict[str, Any]:
    """A CSI snapshot of the source claim: the endpoint serves this frozen copy while
    training goes on writing to the source."""
    name = snapshot_name(endpoint.id, endpoint.generation)
    spec: dict[str, Any] = {"source": {"persistentVolumeClaimName": endpoint.source_claim}}
    if settings.ENDPOINT_SNAPSHOT_CLASS:
        spec["volumeSnapshotClassName"] = settings.ENDPOINT_SNAPSHOT_CLASS
    return {
        "apiVersion": SNAPSHOT_API,
        "kind": "VolumeSnapshot",
        "metadata": _meta(endpoint, name, **{GENERATION_LABEL: str(endpoint.generation)}),
        "spec": spec,
    }


def model_claim(endpoint: Endpoint, size: str) -> dict[str, Any]:
    """A new ReadOnlyMany claim restored from the snapshot, of the snapshot's size."""
    name = snapshot_name(endpoint.id, endpoint.generation)
    spec: dict[str, Any] = {
        "accessModes": ["ReadOnlyMany"],
        "dataSource": {
            "apiGroup": "snapshot.storage.k8s.io",
            "kind": "VolumeSnapshot",
            "name": name,
        },
        "resources": {"requests": {"storage": size}},
    }
    if settings.DISK_STORAGE_CLASS:
        spec["storageClassName"] = settings.DISK_STORAGE_CLASS
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(endpoint, name, **{GENERATION_LABEL: str(endpoint.generation)}),
        "spec": spec,
    }


def model_volume(endpoint: Endpoint) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, mount) of the weights, read-only at /model."""
    if endpoint.source_kind == SourceKind.DATASET:
        volume = {"name": "model", **public_pool_volume()}
        sub_path = f"models/{endpoint.source_path}"
    else:
        claim = snapshot_name(endpoint.id, endpoint.generation)
        volume = {"name": "model", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        sub_path = endpoint.source_path.strip("/")
    mount = {"name": "model", "mountPath": MODEL_DIR, "readOnly": True}
    if sub_path:
        mount["subPath"] = sub_path
    return volume, mount


def engine_env(endpoint: Endpoint) -> list[dict[str, str]]:
    values = {
        "STARVERSE_ENDPOINT_ID": endpoint.id,
        "STARVERSE_ENGINE": endpoint.engine,
        "STARVERSE_MODEL_NAME": endpoint.name,
        "STARVERSE_MODEL_DIR": MODEL_DIR,
        # the init package checks the folder holds a model (config.json) before the engine
        "STARVERSE_SOURCE_FIELD": "source.dataset"
        if endpoint.source_kind == SourceKind.DATASET
        else "source.path",
    }
    return [{"name": key, "value": value} for key, value in values.items()]


def deployment(endpoint: Endpoint, replicas: int) -> dict[str, Any]:
    """The engine's pods. Our own scheduler places them (GPU allocation rows, like
    instances) and binds them, so `schedulerName` keeps kube-scheduler off them; replicas roll
    one by one on an update (a new one Ready before an old one goes)."""
    offering = endpoint.offering
    volume, mount = model_volume(endpoint)
    pod_labels = {**labels(endpoint), GENERATION_LABEL: str(endpoint.generation)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(endpoint, object_name(endpoint.id)),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {ENDPOINT_LABEL: object_name(endpoint.id)}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "schedulerName": SCHEDULER_NAME,
                    "automountServiceAccountToken": False,
                    "restartPolicy": "Always",
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    **(
                        {"runtimeClassName": offering.runtime_class}
                        if offering.runtime_class
                        else {}
                    ),
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "containers": [_engine_container(endpoint, mount)],
                    "volumes": [
                        volume,
                        {
                            "name": "shm",
                            "emptyDir": {
                                "medium": "Memory",
                                "sizeLimit": f"{max(1, offering.memory_gb // 2)}Gi",
                            },
                        },
                    ],
                },
            },
        },
    }


def _engine_container(endpoint: Endpoint, mount: dict[str, Any]) -> dict[str, Any]:
    """The Deployment's one container: the engine behind the serve entry point, with the
    offering's GPUs, CPU and memory as both its requests and its limits, Ready once the
    engine answers /health, the weights at `mount` and shared memory at /dev/shm."""
    offering = endpoint.offering
    resources = {
        "nvidia.com/gpu": str(offering.gpu_count),
        "cpu": str(offering.cpu_cores),
        "memory": f"{offering.memory_gb}Gi",
    }
    return {
        "name": "engine",
        "image": engine_image(endpoint.engine),
        "command": list(SERVE_COMMAND),
        "args": engine_args(endpoint.engine, endpoint.engine_options, endpoint.name),
        "ports": [{"name": "http", "containerPort": ENGINE_PORT}],
        "env": engine_env(endpoint),
        "resources": {"limits": resources, "requests": dict(resources)},
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": ENGINE_PORT},
            "periodSeconds": 2,
            "failureThreshold": 3,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [mount, {"name": "shm", "mountPath": "/dev/shm"}],  # noqa: S108
    }


def service(endpoint: Endpoint) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(endpoint, object_name(endpoint.id)),
        "spec": {
            "type": "ClusterIP",
            "selector": {ENDPOINT_LABEL: object_name(endpoint.id)},
            "ports": [
                {"name": "http", "port": ENGINE_PORT, "targetPort": ENGINE_PORT, "protocol": "TCP"}
            ],
        },
    }


def scaled_object(endpoint: Endpoint) -> dict[str, Any]:
    """KEDA HTTP add-on: replicas between min and max following in-flight requests per replica
    (ENDPOINT_TARGET_CONCURRENCY), down to zero when min is 0 (the interceptor holds the first
    request through the cold start)."""
    name = object_name(endpoint.id)
    low, high = replica_bounds(endpoint)
    return {
        "apiVersion": SCALED_OBJECT_API,
        "kind": "HTTPScaledObject",
        "metadata": _meta(endpoint, name),
        "spec": {
            "hosts": [route_hostname(endpoint.id)],
            "scaleTargetRef": {
                "name": name,
                "kind": "Deployment",
                "apiVersion": "apps/v1",
                "service": name,
                "port": ENGINE_PORT,
            },
            "replicas": {"min": low, "max": high},
            "scalingMetric": {"concurrency": {"targetValue": settings.ENDPOINT_TARGET_CONCURRENCY}},
            "scaledownPeriod": settings.ENDPOINT_SCALEDOWN_PERIOD_S,
        },
    }


def replica_bounds(endpoint: Endpoint) -> tuple[int, int]:
    """(min, max) the autoscaler keeps: 0 and 0 for an endpoint the balance suspended, or
    one that failed (no model: its pods would only crash again)."""
    if endpoint.suspended or endpoint.status == EndpointStatus.FAILED:
        return 0, 0
    return endpoint.min_replicas, endpoint.max_replicas


def http_route(endpoint: Endpoint) -> dict[str, Any]:
    """The gateway's route of the endpoint's host. In production its backend is the KEDA
    interceptor (which counts and holds requests, then forwards to the Service); the
    development gateway plays the interceptor and forwards to the Service itself."""
    parent_namespace, _sep, parent = settings.GATEWAY_ROUTE_PARENT.partition("/")
    name = object_name(endpoint.id)
    return {
        "apiVersion": HTTP_ROUTE_API,
        "kind": "HTTPRoute",
        "metadata": _meta(endpoint, name),
        "spec": {
            "parentRefs": [{"name": parent, "namespace": parent_namespace}],
            "hostnames": [route_hostname(endpoint.id)],
            "rules": [{"backendRefs": [{"name": name, "port": ENGINE_PORT}]}],
        },
    }
