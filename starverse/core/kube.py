"""The one module that talks to Kubernetes, through the official client. Every call has a
timeout; failures come out as RetryableKubeError (timeouts, connection errors, 429, 5xx, an RBAC
denial) or PermanentKubeError (everything else), so tasks know whether trying again can help.

Only the Celery worker talks to the cluster: a process with KUBE_ACCESS off (the web tier, which
holds no cluster credentials) is refused every call with KubeAccessRefused, and one with
KUBE_ACCESS=exec (the web terminal service) may only open exec sessions (exec_open). The worker's
rights in a tenant namespace come from a RoleBinding it makes there when it makes the namespace
(tenant_namespace_ensure; it includes pods/exec, for a cluster's pre-flight check: exec_run),
and so do the terminal service's (pods/exec only); see
deploy/k8s/platform.yaml and docs/operator-guide.md "Cluster credentials"."""

import base64
import contextlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any, Literal, TypedDict

from django.conf import settings
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.stream import stream
from urllib3 import BaseHTTPResponse
from urllib3.exceptions import HTTPError
from websocket import ABNF, WebSocketException, setdefaulttimeout

logger = logging.getLogger(__name__)
TIMEOUT = (3.05, 10)  # connect, read


class KubeError(Exception):
    pass


class RetryableKubeError(KubeError):
    pass


class PermanentKubeError(KubeError):
    pass


class ConflictKubeError(RetryableKubeError):
    """409 on a replace: the object changed since it was read."""


class ClusterNotConfigured(PermanentKubeError):
    pass


class NamespaceGone(RetryableKubeError):
    """A create was refused because its namespace does not exist (deleted since it was made
    sure of): make sure of the namespace again, then try again."""


class ExecTimeout(KubeError):
    """A command run to its end (exec_run) was still running after its timeout: the command's
    doing, not the cluster's, so neither retryable nor a refusal; its session was closed."""


class KubeAccessRefused(Exception):
    """This process may not make this call (KUBE_ACCESS is off: the web tier; or it is `exec`:
    the terminal service, which may only open exec sessions). Not a KubeError, so no handler of
    cluster errors hides it: a request that reaches for the cluster is a bug to fix by handing
    the work to the worker."""


# KUBECONFIG=in-cluster: the pod's own service-account token (the worker's, in production).
IN_CLUSTER = "in-cluster"
RETRYABLE_STATUSES = (0, 429, 500, 502, 503, 504)


# Celery task options as TypedDicts: spread into shared_task(**...), they keep its typed
# overloads (a plain dict would make every task it decorates untyped).
class TaskRetry(TypedDict):
    autoretry_for: tuple[type[BaseException], ...]
    retry_backoff: int
    retry_backoff_max: int
    retry_jitter: bool
    max_retries: int | None


class KubeTaskOptions(TaskRetry):
    bind: Literal[True]
    acks_late: bool
    ignore_result: bool


# How a task that talks to the cluster retries: only retryable errors, with backoff and jitter.
TASK_RETRY: TaskRetry = {
    "autoretry_for": (RetryableKubeError,),
    "retry_backoff": 2,
    "retry_backoff_max": 120,
    "retry_jitter": True,
    "max_retries": 12,
}
# A task that converges one object in the cluster: bound (it retries itself while the object is
# still pending), acknowledged once done, no result kept, retrying as above.
KUBE_TASK: KubeTaskOptions = {"bind": True, "acks_late": True, "ignore_result": True, **TASK_RETRY}
# The same, retrying for as long as the object takes (provisioning waits on the cluster).
KUBE_TASK_UNTIL_DONE: KubeTaskOptions = {**KUBE_TASK, "max_retries": None}
MANAGED = {"app.kubernetes.io/managed-by": "starverse"}
# Kinds outside the core API groups, reached through the custom-objects client: (group,
# version, plural). HTTPRoutes are the gateway's routes to the instances (Gateway API).
HTTP_ROUTE_API = "gateway.networking.k8s.io/v1"
# VolumeSnapshots freeze an endpoint's weights (CSI); HTTPScaledObjects are the KEDA HTTP
# add-on's autoscaling of an endpoint's Deployment.
CUSTOM_KINDS = {
    "HTTPRoute": ("gateway.networking.k8s.io", "v1", "httproutes"),
    "VolumeSnapshot": ("snapshot.storage.k8s.io", "v1", "volumesnapshots"),
    "HTTPScaledObject": ("http.keda.sh", "v1alpha1", "httpscaledobjects"),
}
# The ClusterRole with the worker's verbs inside a tenant namespace, bound there per namespace.
TENANT_ROLE = "starverse-tenant"
# The ClusterRole of the terminal service (pods get, pods/exec create), bound the same way.
EXEC_ROLE = "starverse-exec"
# KUBE_ACCESS of a process that may only open exec sessions (the terminal service).
EXEC_ONLY = "exec"
RBAC_GROUP = "rbac.authorization.k8s.io"
# Label keys the platform owns on its objects: the rest (an operator's, a policy engine's) are
# never changed or removed.
OWNED_LABEL_PREFIXES = (
    "app.kubernetes.io/managed-by",
    "starverse.io/",
    "pod-security.kubernetes.io/",
)


def namespace_name(tenant_id: str) -> str:
    """The tenant's namespace: every object of one tenant lives there."""
    return f"sv-{id_label(tenant_id)}"


def id_label(object_id: str) -> str:
    """A Starverse id as label values and DNS names take it: lower case, no underscore
    (clu_ABC → clu-abc)."""
    return object_id.lower().replace("_", "-")


def tenant_label(tenant_id: str) -> str:
    """The tenant's id as a label value (`starverse.io/tenant`)."""
    return id_label(tenant_id)


def namespace(tenant_id: str) -> dict[str, Any]:
    """The tenant's namespace object; made sure of before anything is created in it."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace_name(tenant_id),
            "labels": {
                **MANAGED,
                "starverse.io/tenant": tenant_label(tenant_id),
                # Pod Security Admission: a tenant pod runs as root with a few added
                # capabilities (sshd), which "restricted" refuses, so "baseline" is enforced
                # (no privileged, host namespaces or ports, no capabilities beyond the
                # baseline set) and "restricted" is warned and audited.
                "pod-security.kubernetes.io/enforce": pod_security_enforce_level(),
                "pod-security.kubernetes.io/enforce-version": "latest",
                "pod-security.kubernetes.io/warn": "restricted",
                "pod-security.kubernetes.io/audit": "restricted",
            },
        },
    }


def tenant_binding(tenant_id: str) -> dict[str, Any]:
    """The RoleBinding that gives the worker's service account the tenant ClusterRole in the
    tenant's namespace, and nowhere else."""
    return _role_binding(tenant_id, TENANT_ROLE, settings.KUBE_WORKER_SERVICE_ACCOUNT)


def tenant_exec_binding(tenant_id: str) -> dict[str, Any]:
    """The RoleBinding that gives the terminal service's account the exec ClusterRole in the
    tenant's namespace, and nowhere else."""
    return _role_binding(tenant_id, EXEC_ROLE, settings.KUBE_TERMINAL_SERVICE_ACCOUNT)


def _role_binding(tenant_id: str, role: str, service_account: str) -> dict[str, Any]:
    namespace, _sep, name = service_account.partition("/")
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": role,
            "namespace": namespace_name(tenant_id),
            "labels": {**MANAGED, "starverse.io/tenant": tenant_label(tenant_id)},
        },
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }


def owned_label_drift(wanted: dict[str, str], have: dict[str, str]) -> dict[str, str | None]:
    """A merge patch of labels that brings our labels to `wanted`: changed or missing ones set,
    ones we own but no longer want removed (None); every other label left alone."""
    drift: dict[str, str | None] = {k: v for k, v in wanted.items() if have.get(k) != v}
    for key in have:
        if key not in wanted and key.startswith(OWNED_LABEL_PREFIXES):
            drift[key] = None
    return drift


def tenant_namespace_ensure(tenant_id: str) -> dict[str, Any]:
    """The tenant's namespace as the platform wants it now, and the worker's and the terminal
    service's RoleBindings in it: created if missing; on one made by an older release, our
    labels (Pod Security levels) are merged in and the bindings' subjects put right. Returns the
    namespace."""
    manifest = namespace(tenant_id)
    existing = ensure(manifest, read_first=True)
    have = (existing.get("metadata") or {}).get("labels") or {}
    drift = owned_label_drift(manifest["metadata"]["labels"], have)
    if drift:
        existing = namespace_patch(manifest["metadata"]["name"], {"metadata": {"labels": drift}})
        logger.info(
            "namespace.labels_updated namespace=%s keys=%s",
            manifest["metadata"]["name"],
            ",".join(sorted(drift)),
        )
    ensure(tenant_binding(tenant_id), update=True, read_first=True)
    ensure(tenant_exec_binding(tenant_id), update=True, read_first=True)
    return existing


def namespace_patch(name: str, body: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch of a namespace (labels, annotations): keys not named stay as they are."""
    return _plain(_call("Namespace.patch", core().patch_namespace, name, body))


def tenant_namespaces() -> list[dict[str, Any]]:
    """Every namespace the platform manages, from one list call."""
    items = _call("Namespace.list", core().list_namespace, label_selector=MANAGED_SELECTOR).items
    return [_plain(item) for item in items]


def pod_security_enforce_level() -> str:
    """ "baseline", unless the public pool is a hostPath volume (which baseline forbids): then
    "privileged", with restricted still warned and audited; use an nfs:// or pvc:// pool."""
    source = settings.PUBLIC_POOL_SOURCE
    return "baseline" if source.startswith(("nfs://", "pvc://")) else "privileged"


def _ours(wanted: dict[str, str], have: dict[str, str]) -> bool:
    """Whether an object is ours: its identity labels (managed-by, starverse.io/*) match; other
    labels (Pod Security levels) may lag behind on objects made by an older release."""
    return all(
        have.get(key) == value
        for key, value in wanted.items()
        if key in MANAGED or key.startswith("starverse.io/")
    )


@dataclass(frozen=True)
class ClusterNode:
    name: str
    labels: dict[str, str]
    gpu_count: int
    cpu_cores: int
    memory_gb: int
    unschedulable: bool
    ready: bool
    # status.allocatable: what the kubelet admits pods against (None where not reported)
    allocatable_cpu_m: int | None = None
    allocatable_memory_mib: int | None = None
    allocatable_ephemeral_mib: int | None = None
    allocatable_pods: int | None = None
    # status.images: (name, bytes) for every name the kubelet lists (tag and digest forms)
    images: tuple[tuple[str, int], ...] = ()


def image_name(reference: str) -> str:
    """An image reference as container runtimes name it in Node.status.images: the registry
    and `library/` filled in, `:latest` when it names neither tag nor digest
    (`starverse/pytorch:2.1` → `docker.io/starverse/pytorch:2.1`)."""
    name, at, digest = reference.strip().partition("@")
    first, slash, _rest = name.partition("/")
    if not slash:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if at:
        return f"{name}@{digest}"
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


@dataclass(frozen=True)
class Target:
    """The cluster the calls of this context go to (a region, fleet.models.Region): its name,
    for messages, and its kubeconfig file ("" = the KUBECONFIG setting, the default cluster)."""

    name: str
    kubeconfig: str = ""


# The cluster of the work at hand; None = KUBECONFIG's. A context variable, so a task that
# serves one region cannot leak its cluster into the next task, or into another thread.
_target: ContextVar[Target | None] = ContextVar("kube_target", default=None)


@contextlib.contextmanager
def cluster(target: Target) -> Iterator[Target]:
    """Every call made inside goes to this cluster: the one seam that makes the module's
    functions (which name no cluster) serve several clusters."""
    token = _target.set(target)
    try:
        yield target
    finally:
        _target.reset(token)


def current_kubeconfig() -> str:
    """The kubeconfig calls go to now: the current cluster's, else KUBECONFIG ("" = none)."""
    target = _target.get()
    if target is not None and target.kubeconfig:
        return target.kubeconfig
    return settings.KUBECONFIG or ""


# One client per kubeconfig, i.e. per cluster: its connection pool and credentials are kept.
@cache
def _api_client(kubeconfig: str) -> client.ApiClient:
    if kubeconfig == IN_CLUSTER:
        configuration = client.Configuration()
        # re-reads the projected token before it expires
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    return config.new_client_from_config(config_file=kubeconfig)


def _client(*, exec_session: bool = False) -> client.ApiClient:
    if not settings.KUBE_ACCESS:
        raise KubeAccessRefused(
            "This process has no cluster access (KUBE_ACCESS is off): hand the work to the "
            "worker through a task."
        )
    if settings.KUBE_ACCESS == EXEC_ONLY and not exec_session:
        raise KubeAccessRefused(
            "This process may only open exec sessions into tenant pods (KUBE_ACCESS=exec): "
            "hand other work to the worker through a task."
        )
    kubeconfig = current_kubeconfig()
    if not kubeconfig:
        target = _target.get()
        where = f" for region {target.name}" if target is not None else ""
        raise ClusterNotConfigured(f"No cluster configured{where} (set KUBECONFIG).")
    try:
        return _api_client(kubeconfig)
    except ConfigException as error:
        raise ClusterNotConfigured(f"Cannot load KUBECONFIG={kubeconfig}: {error}") from error


def api_reachable(timeout_s: float) -> None:
    """Whether the API server answers (GET /version) within the timeout: the readiness probe of
    a process that talks to the cluster. Raises KubeError when it does not."""
    try:
        client.VersionApi(_client()).get_code(_request_timeout=(timeout_s, timeout_s))
    except ApiException as error:
        raise RetryableKubeError(f"version: {error.status} {error.reason}") from error
    except (HTTPError, OSError) as error:
        raise RetryableKubeError(f"version: {type(error).__name__}") from error


def core() -> client.CoreV1Api:
    return client.CoreV1Api(_client())


def _rbac_denied(error: ApiException) -> bool:
    """A 403 from the RBAC authorizer ('User "…" cannot create resource …'), as opposed to one
    from admission (Pod Security, quota), which no retry cures. RBAC may catch up: a binding the
    worker has just made takes a moment to reach the authorizer's cache."""
    message = _message(error)
    return error.status == 403 and ' is forbidden: User "' in message and '" cannot ' in message


def _retryable(operation: str, error: ApiException) -> bool:
    if _rbac_denied(error):
        logger.error(
            "kube.forbidden op=%s message=%s: see the worker's RBAC in deploy/k8s/platform.yaml",
            operation,
            _message(error),
        )
        return True
    return error.status in RETRYABLE_STATUSES


def _call(operation: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("_request_timeout", TIMEOUT)
    try:
        return function(*args, **kwargs)
    except ApiException as error:
        logger.warning(
            "kube.error op=%s status=%s reason=%s", operation, error.status, error.reason
        )
        if _retryable(operation, error):
            raise RetryableKubeError(f"{operation}: {error.status} {error.reason}") from error
        raise PermanentKubeError(f"{operation}: {error.status} {error.reason}") from error
    except (HTTPError, OSError) as error:
        logger.warning("kube.unreachable op=%s error=%s", operation, type(error).__name__)
        raise RetryableKubeError(f"{operation}: {error}") from error


_SUFFIXES = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes resource quantity ("190", "500m", "2032Gi", "1e3") as a number, or None."""
    text = str(value).strip() if value is not None else ""
    if not text:
        return None
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            try:
                return Decimal(text[: -len(suffix)]) * _SUFFIXES[suffix]
            except InvalidOperation:
                return None
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def quantity_gib(value: Any) -> int:
    """A quantity ("2048Gi", "500G") in whole GiB, rounded down; 0 when it is missing or bad."""
    return _scaled(value, 2**30) or 0


def _scaled(value: Any, unit: int, *, milli: bool = False) -> int | None:
    """A quantity in whole units (rounded down), or in thousandths with milli."""
    number = quantity(value)
    if number is None:
        return None
    return max(int(number * 1000) if milli else int(number // unit), 0)


def nodes_list() -> list[ClusterNode]:
    items = _call("nodes.list", core().list_node).items
    result = []
    for item in items:
        capacity = item.status.capacity or {}
        allocatable = item.status.allocatable or {}
        conditions = {c.type: c.status for c in (item.status.conditions or [])}
        result.append(
            ClusterNode(
                name=item.metadata.name,
                labels=dict(item.metadata.labels or {}),
                gpu_count=int(capacity.get("nvidia.com/gpu", "0")),
                cpu_cores=int(str(capacity.get("cpu", "0")).rstrip("m") or 0),
                memory_gb=quantity_gib(capacity.get("memory")),
                unschedulable=bool(item.spec.unschedulable),
                ready=conditions.get("Ready") == "True",
                allocatable_cpu_m=_scaled(allocatable.get("cpu"), 1, milli=True),
                allocatable_memory_mib=_scaled(allocatable.get("memory"), 2**20),
                allocatable_ephemeral_mib=_scaled(allocatable.get("ephemeral-storage"), 2**20),
                allocatable_pods=_scaled(allocatable.get("pods"), 1),
                images=tuple(
                    (name, int(image.size_bytes or 0))
                    for image in item.status.images or []
                    for name in image.names or []
                ),
            )
        )
    return result


NODE_LEASE_NAMESPACE = "kube-node-lease"


@dataclass(frozen=True)
class LeaseSeen:
    """A node's Lease as the kubelet last renewed it (spec.renewTime, as the kubelet wrote
    it: compared for change only, never against this machine's clock)."""

    node: str
    renew_time: str


def _lease_seen(item: Any) -> LeaseSeen:
    renewed = item.spec.renew_time if item.spec else None
    return LeaseSeen(node=item.metadata.name, renew_time=renewed.isoformat() if renewed else "")


def node_leases() -> tuple[str, list[LeaseSeen]]:
    """Every node's Lease (kube-node-lease) and the list's resourceVersion to watch from."""
    api = client.CoordinationV1Api(_client())
    answer = _call("leases.list", api.list_namespaced_lease, NODE_LEASE_NAMESPACE)
    return answer.metadata.resource_version, [_lease_seen(item) for item in answer.items]


def node_leases_watch(resource_version: str, *, timeout_s: int) -> Iterator[tuple[str, LeaseSeen]]:
    """One watch on the node Leases from `resource_version`, for at most `timeout_s`: yields
    (resourceVersion, lease) for each renewal (and a new or changed Lease). A version too old
    (410 Gone) raises RetryableKubeError: list again (node_leases)."""
    api = client.CoordinationV1Api(_client())
    stream_of = watch.Watch().stream(
        api.list_namespaced_lease,
        NODE_LEASE_NAMESPACE,
        resource_version=resource_version,
        timeout_seconds=timeout_s,
        _request_timeout=(TIMEOUT[0], timeout_s + TIMEOUT[1]),
    )
    try:
        for event in stream_of:
            if event["type"] == "ERROR":
                raise RetryableKubeError(f"leases.watch: {event['raw_object']}")
            if event["type"] in ("ADDED", "MODIFIED"):
                item = event["object"]
                yield item.metadata.resource_version, _lease_seen(item)
    except ApiException as error:
        raise RetryableKubeError(f"leases.watch: {error.status} {error.reason}") from error
    except (HTTPError, OSError) as error:
        raise RetryableKubeError(f"leases.watch: {error}") from error


def node_set_unschedulable(name: str, unschedulable: bool) -> None:
    _call("nodes.patch", core().patch_node, name, {"spec": {"unschedulable": unschedulable}})


def _networking() -> client.NetworkingV1Api:
    return client.NetworkingV1Api(_client())


def _apps() -> client.AppsV1Api:
    return client.AppsV1Api(_client())


def daemonsets_managed(namespace: str, label_selector: str) -> dict[str, dict[str, Any]]:
    """The DaemonSets `label_selector` selects in a namespace, by name: one list call."""
    items = _call(
        "DaemonSet.list",
        _apps().list_namespaced_daemon_set,
        namespace,
        label_selector=label_selector,
    ).items
    return {item.metadata.name: _plain(item) for item in items}


def daemonset_replace(manifest: dict[str, Any], existing: dict[str, Any]) -> dict[str, Any]:
    """Replace a DaemonSet we made (`existing`, as listed) with `manifest`: its pods roll to the
    new template. The DaemonSet controller writes its status all the time, so the listed
    resourceVersion is often stale by now: see `_replace_retrying`."""
    return _replace_retrying(manifest, existing, force=True)


def _rbac() -> client.RbacAuthorizationV1Api:
    return client.RbacAuthorizationV1Api(_client())


def _plain(obj: Any) -> dict[str, Any]:
    """An answer as plain JSON data: a raw one (RAW) parsed, a client model serialized."""
    if isinstance(obj, BaseHTTPResponse):
        body = obj.data
        obj.release_conn()
        parsed: dict[str, Any] = json.loads(body)
        return parsed
    plain: dict[str, Any] = _client().sanitize_for_serialization(obj)
    return plain


# The answer to a call as the API server sent it, read by _plain as JSON: the client's models
# are skipped (building one per field of a pod costs milliseconds of CPU a call, more than the
# call itself), and what we return is the same JSON data either way.
RAW = {"_preload_content": False, "_request_timeout": TIMEOUT}


def _custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(_client())


def _operations(kind: str) -> tuple[Any, Any, Any]:
    """(create, read, delete) callables for a kind, taking (namespace, name/body)."""
    if kind in CUSTOM_KINDS:
        return _custom_operations(*CUSTOM_KINDS[kind])
    table = _core_operations(core())
    # namespaced kinds of the other API groups: their client and the methods' snake-case name
    others = {
        "NetworkPolicy": (_networking, "network_policy"),
        "DaemonSet": (_apps, "daemon_set"),
        "Deployment": (_apps, "deployment"),
        "RoleBinding": (_rbac, "role_binding"),
    }
    if kind in others:
        client_of, noun = others[kind]
        group = client_of()
        table[kind] = tuple(
            getattr(group, f"{verb}_namespaced_{noun}") for verb in ("create", "read", "delete")
        )
    create, read, delete = table[kind]
    if kind == "Namespace":
        return create, read, delete
    return (
        lambda ns, body: create(ns, body, **RAW),
        lambda ns, name: read(name, ns, **RAW),
        lambda ns, name: delete(name, ns, **RAW),
    )


def _custom_operations(group: str, version: str, plural: str) -> tuple[Any, Any, Any]:
    """_operations() of a custom resource (CUSTOM_KINDS): the custom objects API's calls with
    the kind's group, version and plural filled in."""
    custom = _custom()
    return (
        lambda ns, body: custom.create_namespaced_custom_object(
            group, version, ns, plural, body, _request_timeout=TIMEOUT
        ),
        lambda ns, name: custom.get_namespaced_custom_object(
            group, version, ns, plural, name, _request_timeout=TIMEOUT
        ),
        lambda ns, name: custom.delete_namespaced_custom_object(
            group, version, ns, plural, name, _request_timeout=TIMEOUT
        ),
    )


def _core_operations(api: client.CoreV1Api) -> dict[str, tuple[Any, Any, Any]]:
    """The core API's (create, read, delete) by kind: for a Namespace already taking
    (namespace, name/body) with the timeout, for the namespaced kinds the client's own
    methods, which _operations() wraps alike."""
    return {
        "Namespace": (
            lambda ns, body: api.create_namespace(body, **RAW),
            lambda ns, name: api.read_namespace(name, **RAW),
            lambda ns, name: api.delete_namespace(name, **RAW),
        ),
        "Secret": (
            api.create_namespaced_secret,
            api.read_namespaced_secret,
            api.delete_namespaced_secret,
        ),
        "PersistentVolumeClaim": (
            api.create_namespaced_persistent_volume_claim,
            api.read_namespaced_persistent_volume_claim,
            api.delete_namespaced_persistent_volume_claim,
        ),
        "Pod": (api.create_namespaced_pod, api.read_namespaced_pod, api.delete_namespaced_pod),
        "Service": (
            api.create_namespaced_service,
            api.read_namespaced_service,
            api.delete_namespaced_service,
        ),
        "ConfigMap": (
            api.create_namespaced_config_map,
            api.read_namespaced_config_map,
            api.delete_namespaced_config_map,
        ),
    }


def _guard(operation: str, function: Any) -> Any:
    try:
        return function()
    except ApiException as error:
        if _retryable(operation, error):
            raise RetryableKubeError(f"{operation}: {error.status} {error.reason}") from error
        raise
    except (HTTPError, OSError) as error:
        raise RetryableKubeError(f"{operation}: {error}") from error


def ensure(
    manifest: dict[str, Any], *, update: bool = False, read_first: bool = False
) -> dict[str, Any]:
    """Create the object, or accept the one already there if we made it (409 → read and
    compare its labels); with `update`, ours is replaced by `manifest` when it differs (a
    Secret by its data), keeping labels and annotations that others put on it. Another owner's
    object under our name is a permanent error.

    With `read_first`, for an object that usually exists already (a tenant's namespace and
    policies, a cluster's shared objects, which every rank's provisioning makes sure of): one
    read, and a create only if it is missing, instead of a create refused with 409 and a read.
    The outcome is the same either way. A create refused because its namespace is missing
    raises NamespaceGone (retryable, once the namespace is made sure of again)."""
    kind, meta = manifest["kind"], manifest["metadata"]
    namespace, name = meta.get("namespace"), meta["name"]
    create, read_fn, _delete = _operations(kind)
    existing = read(kind, namespace, name) if read_first else None
    if existing is None:
        try:
            return _plain(_guard(f"{kind}.create", lambda: create(namespace, manifest)))
        except ApiException as error:
            if error.status == 404 and _namespace_missing(error):
                raise NamespaceGone(f"{kind} {name}: namespace {namespace} not found") from error
            if error.status != 409:
                raise PermanentKubeError(
                    f"{kind} {name}: {error.status} {error.reason}: {_message(error)}"
                ) from error
        existing = _plain(_guard(f"{kind}.read", lambda: read_fn(namespace, name)))
    wanted = meta.get("labels", {})
    have = existing.get("metadata", {}).get("labels") or {}
    if not _ours(wanted, have):
        raise PermanentKubeError(f"{kind} {name} exists and is not ours")
    if not update:
        return existing
    return _replace_retrying(manifest, existing)


# How often a replace reads the object again after a 409 before leaving it to the task's retry.
CONFLICT_ATTEMPTS = 5


def _replace_retrying(
    manifest: dict[str, Any], existing: dict[str, Any] | None, *, force: bool = False
) -> dict[str, Any]:
    """Replace `existing` by `manifest` when it differs (always with `force`), keeping the
    labels and annotations others put on it.

    Controllers write the status of what we make (the DaemonSet controller, KEDA on an
    HTTPScaledObject, the Deployment controller) and every status write moves the
    resourceVersion, so a replace from an object read a moment ago meets 409 Conflict as a
    matter of course. We own the whole spec, so on a conflict the object is read again and the
    replace tried again (client-go's RetryOnConflict); only an object that keeps changing under
    us CONFLICT_ATTEMPTS times, or one deleted meanwhile, is left to the task's retry."""
    kind, meta = manifest["kind"], manifest["metadata"]
    namespace, name = meta.get("namespace"), meta["name"]
    for attempt in range(CONFLICT_ATTEMPTS):
        if existing is None:
            raise RetryableKubeError(f"{kind} {name}: deleted meanwhile")
        if not force and not _differs(manifest, existing):
            return existing
        old_meta = existing["metadata"]
        merged = {
            **meta,
            "labels": {**(old_meta.get("labels") or {}), **meta.get("labels", {})},
            "annotations": {
                **(old_meta.get("annotations") or {}),
                **(meta.get("annotations") or {}),
            },
            "resourceVersion": old_meta["resourceVersion"],
        }
        logger.info("kube.replace kind=%s namespace=%s name=%s", kind, namespace, name)
        try:
            return _replace({**manifest, "metadata": merged})
        except ConflictKubeError:
            logger.info("kube.conflict kind=%s name=%s attempt=%d", kind, name, attempt + 1)
            existing = read(kind, namespace, name)
    raise RetryableKubeError(f"{kind} {name}: changed meanwhile")


def _differs(manifest: dict[str, Any], existing: dict[str, Any]) -> bool:
    """Whether the object on the cluster differs from the rendered one in what we render: our
    labels and every top-level field (spec, roleRef, subjects …); a Secret by its data, which
    the API server answers base64-encoded whether it was sent as stringData or data."""
    have = existing.get("metadata", {}).get("labels") or {}
    if any(have.get(key) != value for key, value in manifest["metadata"].get("labels", {}).items()):
        return True
    if manifest["kind"] == "Secret":
        wanted = dict(manifest.get("data") or {})
        for key, value in (manifest.get("stringData") or {}).items():
            wanted[key] = base64.b64encode(value.encode()).decode()
        return (existing.get("data") or {}) != wanted or existing.get("type") != manifest.get(
            "type", existing.get("type")
        )
    skip = ("apiVersion", "kind", "metadata", "status")
    if manifest["kind"] in DEFAULTED_KINDS:
        return any(
            not _covers(existing.get(key), value)
            for key, value in manifest.items()
            if key not in skip
        )
    return any(existing.get(key) != value for key, value in manifest.items() if key not in skip)


# Kinds the API server fills in defaults for throughout the spec (a Deployment's strategy, its
# pod template's dnsPolicy …): ours differs only where what we render is not there as rendered.
DEFAULTED_KINDS = ("Deployment", "HTTPScaledObject")


def _covers(have: Any, want: Any) -> bool:
    """Whether `have` holds everything of `want` (dicts by key, lists item by item)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_covers(have.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(have) == len(want)
            and all(_covers(h, w) for h, w in zip(have, want, strict=True))
        )
    return bool(have == want)


def _replace(manifest: dict[str, Any]) -> dict[str, Any]:
    """PUT `manifest` (it carries the resourceVersion it replaces); 409 → ConflictKubeError."""
    kind, meta = manifest["kind"], manifest["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    if kind in CUSTOM_KINDS:
        group, version, plural = CUSTOM_KINDS[kind]
        custom = _custom()

        def put() -> Any:
            return custom.replace_namespaced_custom_object(
                group, version, namespace, plural, name, manifest, _request_timeout=TIMEOUT
            )
    else:
        replace = {
            "Secret": lambda: core().replace_namespaced_secret,
            "ConfigMap": lambda: core().replace_namespaced_config_map,
            "NetworkPolicy": lambda: _networking().replace_namespaced_network_policy,
            "RoleBinding": lambda: _rbac().replace_namespaced_role_binding,
            "Deployment": lambda: _apps().replace_namespaced_deployment,
            "DaemonSet": lambda: _apps().replace_namespaced_daemon_set,
        }[kind]()

        def put() -> Any:
            return replace(name, namespace, manifest, **RAW)

    try:
        return _plain(_guard(f"{kind}.replace", put))
    except ApiException as error:
        if error.status == 409:  # a matter of course: the caller reads it again
            raise ConflictKubeError(f"{kind} {name}: changed meanwhile") from error
        logger.warning(
            "kube.error op=%s.replace status=%s reason=%s", kind, error.status, error.reason
        )
        raise PermanentKubeError(
            f"{kind} {name}: {error.status} {error.reason}: {_message(error)}"
        ) from error


def read(kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
    _create, read_fn, _delete = _operations(kind)
    try:
        return _plain(_guard(f"{kind}.read", lambda: read_fn(namespace, name)))
    except ApiException as error:
        if error.status == 404:
            return None
        raise PermanentKubeError(f"{kind} {name}: {error.status} {error.reason}") from error


def delete(
    kind: str, namespace: str | None, name: str, *, force: bool = False, grace_s: int | None = None
) -> bool:
    """Delete; an object that is already gone counts as deleted. True if it existed. `force`
    (pods only) skips the grace period: the way to free a pod whose node is unreachable;
    `grace_s` (pods only) gives its containers that long between SIGTERM and SIGKILL instead
    of the pod's own terminationGracePeriodSeconds (a preempted spot pod's notice)."""
    _create, _read, delete_fn = _operations(kind)
    if force or grace_s is not None:
        api = core()
        grace = 0 if force else max(0, int(grace_s or 0))

        def delete_fn(ns: str | None, obj: str) -> Any:
            return api.delete_namespaced_pod(obj, ns, grace_period_seconds=grace, **RAW)

    try:
        answer = _guard(f"{kind}.delete", lambda: delete_fn(namespace, name))
    except ApiException as error:
        if error.status == 404:
            return False
        raise PermanentKubeError(f"{kind} {name}: {error.status} {error.reason}") from error
    if isinstance(answer, BaseHTTPResponse):  # read to its end: the connection goes back
        answer.drain_conn()
        answer.release_conn()
    return True


def claim_patch(namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Patch a PersistentVolumeClaim (labels, or a larger storage request to grow it)."""
    return _plain(
        _call(
            "PersistentVolumeClaim.patch",
            core().patch_namespaced_persistent_volume_claim,
            name,
            namespace,
            body,
        )
    )


def node_volume_stats(node_name: str) -> list[dict[str, Any]]:
    """The kubelet's volume statistics of a node (its Summary API, through the apiserver's
    node proxy): one item per mounted claim, with pvcRef and usedBytes."""
    # the generated client would turn the JSON body into a Python repr; read it raw
    response = _call(
        "node.stats",
        core().connect_get_node_proxy_with_path,
        node_name,
        "stats/summary",
        _preload_content=False,
    )
    summary = json.loads(response.data)
    return [
        volume
        for pod in (summary or {}).get("pods") or []
        for volume in pod.get("volume") or []
        if volume.get("pvcRef")
    ]


def warning_events() -> list[dict[str, Any]]:
    """Warning events about pods in every namespace (OOMKilled, BackOff, FailedMount …)."""
    items = _call(
        "events.list",
        core().list_event_for_all_namespaces,
        field_selector="type=Warning,involvedObject.kind=Pod",
    ).items
    return [_plain(item) for item in items]


def events_for(namespace: str, name: str) -> list[dict[str, Any]]:
    answer = _call(
        "events.list",
        core().list_namespaced_event,
        namespace,
        field_selector=f"involvedObject.name={name}",
        _preload_content=False,
    )
    items: list[dict[str, Any]] = _plain(answer).get("items") or []
    return items


def _namespace_missing(error: ApiException) -> bool:
    """Whether a 404 says the namespace is missing (its Status names the namespace), not that
    the API server serves no such kind."""
    try:
        details = json.loads(error.body or "{}").get("details") or {}
    except ValueError:
        return False
    return bool(details.get("kind") == "namespaces")


def _message(error: ApiException) -> str:
    try:
        message: str = json.loads(error.body or "{}").get("message", "")
    except ValueError:
        return ""
    return message


MANAGED_SELECTOR = "app.kubernetes.io/managed-by=starverse"
# What an instance (or a cluster's rank) owns: ours, less an inference endpoint's objects, which
# its own controller keeps (the endpoints app), so the instances' clean-up never reaps them. An
# image's build pod carries starverse.io/image (ClusterPod.build): the reconcile loop tells it
# from an instance's pod by that.
INSTANCE_SELECTOR = f"{MANAGED_SELECTOR},!starverse.io/endpoint"
IMAGE_LABEL = "starverse.io/image"  # an image's build pod, by the image it saves


def pod_log(
    namespace: str,
    name: str,
    *,
    tail_lines: int | None = None,
    limit_bytes: int | None = None,
    previous: bool = False,
    since_seconds: int | None = None,
    timestamps: bool = False,
) -> str:
    """The main container's output, as `kubectl logs` reads it ("" when the pod is gone or
    its container never ran); `timestamps`: each line after the kubelet's time of it."""
    options: dict[str, Any] = {"container": "main"}
    if tail_lines is not None:
        options["tail_lines"] = tail_lines
    if since_seconds is not None:
        options["since_seconds"] = since_seconds
    if timestamps:
        options["timestamps"] = True
    if limit_bytes is not None:
        options["limit_bytes"] = limit_bytes
    if previous:
        options["previous"] = True
    try:
        text = _call("Pod.log", core().read_namespaced_pod_log, name, namespace, **options)
    except PermanentKubeError:
        return ""
    return str(text or "")


@dataclass(frozen=True)
class ContainerEnd:
    """How a container ended, as the kubelet reports it (state.terminated)."""

    exit_code: int
    finished_at: datetime | None
    reason: str
    message: str


def container_end(pod: Any) -> ContainerEnd | None:
    """The end of a pod's first container (the kubernetes client's V1Pod), if it has ended."""
    statuses = (pod.status and pod.status.container_statuses) or []
    terminated = statuses[0].state and statuses[0].state.terminated if statuses else None
    if terminated is None:
        return None
    return ContainerEnd(
        exit_code=int(terminated.exit_code),
        finished_at=terminated.finished_at,
        reason=terminated.reason or "",
        message=terminated.message or "",
    )


@dataclass(frozen=True)
class ClusterPod:
    namespace: str
    name: str
    phase: str
    # its first container's end, once it has ended (a pod that runs a program to its end)
    ended: ContainerEnd | None = None
    # why the kubelet failed the pod itself, if it did (Evicted, NodeShutdown, OutOf…)
    reason: str = ""
    # it is being deleted: its containers end because they were told to, not of themselves
    deleting: bool = False
    # an image's build pod (labelled starverse.io/image), not an instance's
    build: bool = False


def pods_managed(
    namespaces: list[str], *, label_selector: str = MANAGED_SELECTOR
) -> list[ClusterPod]:
    """Every pod the platform manages in these namespaces (or those `label_selector` selects),
    with its phase: one list call per namespace (the worker may list only inside tenant
    namespaces)."""
    api = core()
    return [
        ClusterPod(
            item.metadata.namespace,
            item.metadata.name,
            (item.status and item.status.phase) or "",
            container_end(item),
            (item.status and item.status.reason) or "",
            item.metadata.deletion_timestamp is not None,
            IMAGE_LABEL in (item.metadata.labels or {}),
        )
        for namespace in namespaces
        for item in _call(
            "Pod.list", api.list_namespaced_pod, namespace, label_selector=label_selector
        ).items
    ]


def managed(
    kind: str, namespaces: list[str], *, label_selector: str = MANAGED_SELECTOR
) -> list[tuple[str, str]]:
    """(namespace, name) of every object of this kind that the platform manages in these
    namespaces (or only those `label_selector` selects), one list call per namespace."""
    if kind in CUSTOM_KINDS:
        group, version, plural = CUSTOM_KINDS[kind]
        custom = _custom()
        return [
            (item["metadata"]["namespace"], item["metadata"]["name"])
            for namespace in namespaces
            for item in _call(
                f"{kind}.list",
                custom.list_namespaced_custom_object,
                group,
                version,
                namespace,
                plural,
                label_selector=label_selector,
            )["items"]
        ]
    api = core()
    listing = {
        "Service": api.list_namespaced_service,
        "PersistentVolumeClaim": api.list_namespaced_persistent_volume_claim,
        "Secret": api.list_namespaced_secret,
        "ConfigMap": api.list_namespaced_config_map,
    }[kind]
    return [
        (item.metadata.namespace, item.metadata.name)
        for namespace in namespaces
        for item in _call(f"{kind}.list", listing, namespace, label_selector=label_selector).items
    ]


# --- Deployments and a custom scheduler's pods (inference endpoints) ------------------------


def deployment_scale(namespace: str, name: str, replicas: int) -> None:
    """Set a Deployment's replica count through its scale subresource (what the autoscaler
    writes too): a manual scale is immediate."""
    _call(
        "Deployment.scale",
        _apps().patch_namespaced_deployment_scale,
        name,
        namespace,
        {"spec": {"replicas": replicas}},
    )


def deployment_replicas(namespaces: list[str], label_selector: str) -> dict[tuple[str, str], int]:
    """(namespace, name) → `spec.replicas` of every Deployment these labels select in these
    namespaces (what the autoscaler last wrote, or a manual scale): one list call per
    namespace."""
    apps = _apps()
    return {
        (item.metadata.namespace, item.metadata.name): _replicas(item.spec.replicas)
        for namespace in namespaces
        for item in _call(
            "Deployment.list",
            apps.list_namespaced_deployment,
            namespace,
            label_selector=label_selector,
        ).items
    }


def _replicas(value: int | None) -> int:
    return 1 if value is None else int(value)  # the API's default for an unset count


def pods_labelled(namespaces: list[str], label_selector: str) -> list[dict[str, Any]]:
    """Every pod these labels select in these namespaces, as plain objects: one list call per
    namespace."""
    api = core()
    return [
        _plain(item)
        for namespace in namespaces
        for item in _call(
            "Pod.list", api.list_namespaced_pod, namespace, label_selector=label_selector
        ).items
    ]


def pod_bind(namespace: str, name: str, node_name: str) -> bool:
    """Bind a pending pod of our own scheduler to a node (pods/binding), as kube-scheduler does.
    False when the pod is gone or already bound (409): the caller gives back what it held.
    The answer is a Status the generated client cannot read as a Binding, so it is not read."""
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }
    try:
        _guard(
            "Pod.bind",
            lambda: core().create_namespaced_pod_binding(
                name, namespace, body, _preload_content=False, _request_timeout=TIMEOUT
            ),
        )
    except ApiException as error:
        if error.status in (404, 409):
            return False
        raise PermanentKubeError(f"Pod {name} binding: {error.status} {error.reason}") from error
    return True


# --- exec: the web terminal, and the worker's own checks ------------------------------------

EXEC_CONNECT_TIMEOUT = 10.0  # seconds to open the exec WebSocket (a session then lasts)
_HANDSHAKE_STATUS = re.compile(r"Handshake status (\d{3})")
STDIN, STDOUT, STDERR, EXEC_ERROR, RESIZE = 0, 1, 2, 3, 4


class ExecSession:
    """A command running in a container through the API server's exec subresource, over one
    WebSocket (the v4 channel protocol): stdin and resizes go in, output comes out, and `close`
    ends it on the cluster's side as well. `receive` blocks; `send`, `resize` and `close` may be
    called from other threads meanwhile."""

    def __init__(self, ws: Any, api_client: client.ApiClient) -> None:
        self._ws = ws
        self._api_client = api_client
        self.exit_code: int | None = None  # set when the API server reports how it ended

    def send(self, data: bytes) -> None:
        self._ws.write_channel(STDIN, data)

    def resize(self, cols: int, rows: int) -> None:
        self._ws.write_channel(RESIZE, json.dumps({"Width": cols, "Height": rows}).encode())

    def receive(self) -> bytes | None:
        """The next output (stdout or stderr, as bytes), or None once the session has ended."""
        sock = self._ws.sock
        while True:
            try:
                opcode, frame = sock.recv_data_frame(True)
            except (WebSocketException, OSError, ValueError):
                return None
            if opcode == ABNF.OPCODE_CLOSE:
                return None
            data = frame.data if isinstance(frame.data, bytes) else str(frame.data).encode()
            if opcode not in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) or not data:
                continue
            channel, payload = data[0], data[1:]
            if channel in (STDOUT, STDERR) and payload:
                return bytes(payload)
            if channel == EXEC_ERROR and payload:
                self.exit_code = _exit_code(payload)

    def close(self) -> None:
        """End the session: a close frame to the API server (which ends the process's
        connection), then the socket shut, which also wakes a thread blocked in `receive`."""
        sock = self._ws.sock
        with contextlib.suppress(WebSocketException, OSError):
            sock.send_close()
        sock.abort()
        sock.shutdown()
        self._api_client.close()


def _exit_code(status: bytes) -> int | None:
    try:
        body = json.loads(status)
    except ValueError:
        return None
    if body.get("status") == "Success":
        return 0
    for cause in (body.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message"))
            except (TypeError, ValueError):
                return None
    return None


def _exec_connect(
    base: client.ApiClient,
    namespace: str,
    pod: str,
    *,
    container: str,
    command: list[str],
    interactive: bool,
) -> tuple[Any, client.ApiClient]:
    """The exec WebSocket into a container and the ApiClient it owns (kubernetes.stream swaps
    a client's request method while it connects, so each session has its own). A refusal by
    RBAC, a missing pod or a container that is not running is a PermanentKubeError; an
    unreachable API server a RetryableKubeError."""
    api_client = client.ApiClient(base.configuration)
    # websocket-client takes its connect timeout from this default (the processes that exec
    # open only exec WebSockets with it); an interactive session's socket then blocks without
    setdefaulttimeout(EXEC_CONNECT_TIMEOUT)
    try:
        ws = stream(
            client.CoreV1Api(api_client).connect_get_namespaced_pod_exec,
            pod,
            namespace,
            container=container,
            command=command,
            stdin=interactive,
            stdout=True,
            stderr=True,
            tty=interactive,
            **({"binary": True} if interactive else {}),
            _preload_content=False,
        )
    except ApiException as error:
        api_client.close()
        found = _HANDSHAKE_STATUS.search(str(error.reason))
        status = int(found.group(1)) if found else 0
        logger.warning(
            "kube.exec_refused namespace=%s pod=%s status=%s", namespace, pod, status or "-"
        )
        if status == 403:
            logger.error(
                "kube.forbidden op=pods.exec namespace=%s: see the pods/exec rules in "
                "deploy/k8s/platform.yaml",
                namespace,
            )
        if status in RETRYABLE_STATUSES:
            raise RetryableKubeError(f"pods.exec {pod}: {status or 'unreachable'}") from error
        raise PermanentKubeError(f"pods.exec {pod}: {status}") from error
    return ws, api_client


def exec_open(namespace: str, pod: str, *, container: str, command: list[str]) -> ExecSession:
    """Run `command` in a container with stdin and a TTY (a shell, for the web terminal). The
    only call a process with KUBE_ACCESS=exec may make; errors as _exec_connect's."""
    ws, api_client = _exec_connect(
        _client(exec_session=True),
        namespace,
        pod,
        container=container,
        command=command,
        interactive=True,
    )
    ws.sock.settimeout(None)
    return ExecSession(ws, api_client)


def exec_run(
    namespace: str,
    pod: str,
    *,
    container: str,
    command: list[str],
    timeout: float,
    beat: Callable[[], object] | None = None,
    beat_every: float = 10.0,
) -> tuple[int | None, str]:
    """Run `command` in a container to its end, without stdin or a TTY (the worker's own
    checks, such as a cluster's pre-flight): its exit code (None if the API server did not say)
    and its standard output. Needs `create` on pods/exec in the namespace (the worker's
    starverse-tenant role). A refusal or a missing pod is a PermanentKubeError; an unreachable
    API server a RetryableKubeError; a command still running after `timeout` seconds an
    ExecTimeout. `beat`, if given, is called every `beat_every` seconds while the command runs
    (the caller's sign of life, such as a lease renewed)."""
    ws, api_client = _exec_connect(
        _client(), namespace, pod, container=container, command=command, interactive=False
    )
    try:
        deadline = next_beat = time.monotonic() + timeout
        if beat is not None:
            next_beat = time.monotonic() + beat_every
        while ws.is_open() and (left := deadline - time.monotonic()) > 0:
            ws.update(timeout=max(0.0, min(left, next_beat - time.monotonic())))
            if beat is not None and ws.is_open() and time.monotonic() >= next_beat:
                beat()  # at most once every beat_every s, however often the command prints
                next_beat = time.monotonic() + beat_every
        if ws.is_open():
            raise ExecTimeout(f"pods.exec {pod}: still running after {timeout:g}s")
        output = ws.read_stdout() or ""
        return ws.returncode, output
    except (WebSocketException, OSError) as error:
        raise RetryableKubeError(f"pods.exec {pod}: {error}") from error
    finally:
        ws.close()
        api_client.close()
