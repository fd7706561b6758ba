"""Defaulting the apiserver (and its default admission plugins) applies to new and updated
objects, as far as the Kubernetes API emulator (a development stand-in) models it."""

from __future__ import annotations

import base64
import copy
import datetime as dt
from typing import Any

from .quantity import QuantityError, parse_quantity

Obj = dict[str, Any]

DEFAULT_TOLERATIONS = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)


def now_iso(moment: dt.datetime | None = None) -> str:
    moment = moment or dt.datetime.now(dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def _image_pull_policy(image: str) -> str:
    name = image.rsplit("/", 1)[-1]
    if "@" in name:
        return "IfNotPresent"
    if ":" not in name or name.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _stringify_quantities(values: Any) -> None:
    """The apiserver serializes every quantity as a string (``8`` → ``"8"``)."""
    if isinstance(values, dict):
        for name, value in values.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                values[name] = str(value)


def _default_container(container: Obj) -> None:
    if not isinstance(container, dict):
        return
    if isinstance(container.get("image"), str) and container["image"]:
        container.setdefault("imagePullPolicy", _image_pull_policy(container["image"]))
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    resources = container.setdefault("resources", {})
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
        requests = resources.setdefault("requests", {})
        if isinstance(requests, dict):
            for name, value in resources["limits"].items():
                requests.setdefault(name, value)
    if isinstance(resources, dict):
        for section in ("limits", "requests"):
            _stringify_quantities(resources.get(section))
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def qos_class(spec: Obj) -> str:
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    requests_any = limits_all = False
    guaranteed = bool(containers)
    for container in containers:
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        if requests or limits:
            requests_any = True
        for name in ("cpu", "memory"):
            if name not in limits or str(requests.get(name, limits.get(name))) != str(
                limits.get(name)
            ):
                guaranteed = False
        limits_all = limits_all or bool(limits)
    if guaranteed:
        return "Guaranteed"
    return "Burstable" if requests_any or limits_all else "BestEffort"


def default_pod(pod: Obj, creating: bool) -> None:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            _default_container(container)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    if creating:
        tolerations = spec.setdefault("tolerations", [])
        if isinstance(tolerations, list):
            for default in DEFAULT_TOLERATIONS:
                already = any(
                    isinstance(t, dict)
                    and t.get("key") == default["key"]
                    and t.get("effect", "NoExecute") in ("NoExecute", "")
                    for t in tolerations
                )
                if not already:
                    tolerations.append(dict(default))
        pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def default_service(svc: Obj) -> None:
    spec = svc.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])


def default_secret(secret: Obj) -> None:
    secret.setdefault("type", "Opaque")
    string_data = secret.pop("stringData", None)
    if isinstance(string_data, dict):
        data = secret.setdefault("data", {})
        if isinstance(data, dict):
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()


def default_pvc(pvc: Obj, creating: bool) -> None:
    spec = pvc.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("volumeMode", "Filesystem")
    if isinstance(spec.get("resources"), dict):
        for section in ("limits", "requests"):
            _stringify_quantities(spec["resources"].get(section))
    if creating:
        spec.setdefault("storageClassName", "standard")
        finalizers = pvc["metadata"].setdefault("finalizers", [])
        if "kubernetes.io/pvc-protection" not in finalizers:
            finalizers.append("kubernetes.io/pvc-protection")


def bind_pvc(pvc: Obj) -> None:
    """What the (emulated) provisioner and PV controller do: bind to a fresh volume."""
    spec = pvc["spec"]
    spec["volumeName"] = f"pvc-{pvc['metadata']['uid']}"
    annotations = pvc["metadata"].setdefault("annotations", {})
    annotations.setdefault("pv.kubernetes.io/bind-completed", "yes")
    annotations.setdefault("pv.kubernetes.io/bound-by-controller", "yes")
    annotations.setdefault("volume.kubernetes.io/storage-provisioner", "starverse.io/emulated")
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")
    pvc["status"] = {
        "phase": "Bound",
        "accessModes": copy.deepcopy(spec.get("accessModes") or []),
        "capacity": {"storage": storage},
    }


def default_workload(obj: Obj, deployment: bool, creating: bool) -> None:
    """Deployments and ReplicaSets: replicas, the rollout strategy and the pod template's
    defaults, as the apps/v1 defaulting does."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("replicas", 1)
    if deployment:
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxSurge", "25%")
                    rolling.setdefault("maxUnavailable", "25%")
    template = spec.get("template")
    if isinstance(template, dict):
        default_pod(template, creating=False)
    if creating:
        obj["status"] = {} if deployment else {"replicas": 0}


def default_pvc_source(pvc: Obj) -> None:
    """``dataSource`` and ``dataSourceRef`` mirror each other when only one is given."""
    spec = pvc.get("spec")
    if not isinstance(spec, dict):
        return
    source, ref = spec.get("dataSource"), spec.get("dataSourceRef")
    if isinstance(source, dict) and ref is None:
        spec["dataSourceRef"] = copy.deepcopy(source)
    elif isinstance(ref, dict) and source is None and not ref.get("namespace"):
        spec["dataSource"] = {k: v for k, v in ref.items() if k != "namespace"}


def default_namespace(ns: Obj, creating: bool) -> None:
    ns.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    labels = ns["metadata"].setdefault("labels", {})
    if isinstance(labels, dict):
        labels["kubernetes.io/metadata.name"] = ns["metadata"].get("name", "")
    if creating:
        ns["status"] = {"phase": "Active"}


def apply_defaults(plural: str, obj: Obj, creating: bool) -> None:
    if plural == "pods":
        default_pod(obj, creating)
    elif plural == "services":
        default_service(obj)
    elif plural == "secrets":
        default_secret(obj)
    elif plural == "persistentvolumeclaims":
        default_pvc(obj, creating)
        if creating:
            default_pvc_source(obj)
    elif plural in ("deployments", "replicasets"):
        default_workload(obj, plural == "deployments", creating)
    elif plural == "namespaces":
        default_namespace(obj, creating)


def pod_requests(pod: Obj) -> dict[str, Any]:
    """Effective requests of a pod: max(sum of containers, largest init container)."""
    from fractions import Fraction

    total: dict[str, Fraction] = {}
    spec = pod.get("spec") or {}
    for container in spec.get("containers") or []:
        resources = (container or {}).get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in merged.items():
            try:
                total[name] = total.get(name, Fraction(0)) + parse_quantity(value)
            except (QuantityError, TypeError):
                continue
    for container in spec.get("initContainers") or []:
        resources = (container or {}).get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in merged.items():
            try:
                total[name] = max(total.get(name, Fraction(0)), parse_quantity(value))
            except (QuantityError, TypeError):
                continue
    return total
