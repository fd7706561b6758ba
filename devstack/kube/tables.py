"""Server-side ``meta.k8s.io/v1`` Tables (what ``kubectl get`` asks for) in the Kubernetes API
emulator (a development stand-in), with the columns the real apiserver prints."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from .defaults import parse_time
from .resources import ResourceType

Obj = dict[str, Any]
Column = tuple[str, str, int, Callable[[Obj], Any]]  # name, type, priority, cell


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery duration.HumanDuration."""
    if seconds < -1:
        return "<invalid>"
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24 - (hours // 24 // 365) * 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _age(value: str | None) -> str:
    moment = parse_time(value)
    if moment is None:
        return "<unknown>"
    return human_duration((dt.datetime.now(dt.UTC) - moment).total_seconds())


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _name(obj: Obj) -> str:
    return _meta(obj).get("name", "")


def _created(obj: Obj) -> str:
    return _age(_meta(obj).get("creationTimestamp"))


def _pod_status(pod: Obj) -> str:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for item in status.get("containerStatuses") or []:
        state = item.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if _meta(pod).get("deletionTimestamp"):
        return "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod_ready(pod: Obj) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _node_status(node: Obj) -> str:
    state = "Unknown"
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            state = "Ready" if condition.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    return state


def _node_roles(node: Obj) -> str:
    roles = sorted(
        key.split("/", 1)[1]
        for key in (_meta(node).get("labels") or {})
        if key.startswith("node-role.kubernetes.io/")
    )
    return ",".join(roles) or "<none>"


def _node_address(node: Obj, kind: str) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == kind:
            return address.get("address", "")
    return "<none>"


def _ports(svc: Obj) -> str:
    parts = []
    for port in (svc.get("spec") or {}).get("ports") or []:
        text = f"{port.get('port')}"
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        parts.append(f"{text}/{port.get('protocol', 'TCP')}")
    return ",".join(parts) or "<none>"


def _external_ip(svc: Obj) -> str:
    spec = svc.get("spec") or {}
    if spec.get("type") == "LoadBalancer":
        ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        return ",".join(i.get("ip") or i.get("hostname", "") for i in ingress) or "<pending>"
    if spec.get("type") == "ExternalName":
        return spec.get("externalName", "")
    return ",".join(spec.get("externalIPs") or []) or "<none>"


def _event_object(event: Obj) -> str:
    involved = event.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


COLUMNS: dict[str, list[Column]] = {
    "nodes": [
        ("Name", "string", 0, _name),
        ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, _node_roles),
        ("Age", "string", 0, _created),
        (
            "Version",
            "string",
            0,
            lambda n: ((n.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""),
        ),
        ("Internal-IP", "string", 1, lambda n: _node_address(n, "InternalIP")),
        ("External-IP", "string", 1, lambda n: _node_address(n, "ExternalIP")),
        (
            "OS-Image",
            "string",
            1,
            lambda n: ((n.get("status") or {}).get("nodeInfo") or {}).get("osImage", ""),
        ),
        (
            "Kernel-Version",
            "string",
            1,
            lambda n: ((n.get("status") or {}).get("nodeInfo") or {}).get("kernelVersion", ""),
        ),
        (
            "Container-Runtime",
            "string",
            1,
            lambda n: ((n.get("status") or {}).get("nodeInfo") or {}).get(
                "containerRuntimeVersion", ""
            ),
        ),
    ],
    "pods": [
        ("Name", "string", 0, _name),
        ("Ready", "string", 0, _pod_ready),
        ("Status", "string", 0, _pod_status),
        (
            "Restarts",
            "string",
            0,
            lambda p: str(
                sum(
                    s.get("restartCount", 0)
                    for s in (p.get("status") or {}).get("containerStatuses") or []
                )
            ),
        ),
        ("Age", "string", 0, _created),
        ("IP", "string", 1, lambda p: (p.get("status") or {}).get("podIP") or "<none>"),
        ("Node", "string", 1, lambda p: (p.get("spec") or {}).get("nodeName") or "<none>"),
        (
            "Nominated Node",
            "string",
            1,
            lambda p: (p.get("status") or {}).get("nominatedNodeName") or "<none>",
        ),
        ("Readiness Gates", "string", 1, lambda p: "<none>"),
    ],
    "namespaces": [
        ("Name", "string", 0, _name),
        ("Status", "string", 0, lambda n: (n.get("status") or {}).get("phase", "")),
        ("Age", "string", 0, _created),
    ],
    "services": [
        ("Name", "string", 0, _name),
        ("Type", "string", 0, lambda s: (s.get("spec") or {}).get("type", "")),
        ("Cluster-IP", "string", 0, lambda s: (s.get("spec") or {}).get("clusterIP") or "<none>"),
        ("External-IP", "string", 0, _external_ip),
        ("Port(s)", "string", 0, _ports),
        ("Age", "string", 0, _created),
        (
            "Selector",
            "string",
            1,
            lambda s: (
                ",".join(
                    f"{k}={v}" for k, v in ((s.get("spec") or {}).get("selector") or {}).items()
                )
                or "<none>"
            ),
        ),
    ],
    "persistentvolumeclaims": [
        ("Name", "string", 0, _name),
        (
            "Status",
            "string",
            0,
            lambda c: (
                "Terminating"
                if _meta(c).get("deletionTimestamp")
                else (c.get("status") or {}).get("phase", "")
            ),
        ),
        ("Volume", "string", 0, lambda c: (c.get("spec") or {}).get("volumeName", "")),
        (
            "Capacity",
            "string",
            0,
            lambda c: ((c.get("status") or {}).get("capacity") or {}).get("storage", ""),
        ),
        (
            "Access Modes",
            "string",
            0,
            lambda c: ",".join(
                {
                    "ReadWriteOnce": "RWO",
                    "ReadOnlyMany": "ROX",
                    "ReadWriteMany": "RWX",
                    "ReadWriteOncePod": "RWOP",
                }.get(m, m)
                for m in (c.get("status") or {}).get("accessModes") or []
            ),
        ),
        (
            "StorageClass",
            "string",
            0,
            lambda c: (c.get("spec") or {}).get("storageClassName") or "<unset>",
        ),
        ("VolumeAttributesClass", "string", 0, lambda c: "<unset>"),
        ("Age", "string", 0, _created),
    ],
    "secrets": [
        ("Name", "string", 0, _name),
        ("Type", "string", 0, lambda s: s.get("type", "")),
        ("Data", "integer", 0, lambda s: len(s.get("data") or {})),
        ("Age", "string", 0, _created),
    ],
    "configmaps": [
        ("Name", "string", 0, _name),
        ("Data", "integer", 0, lambda c: len(c.get("data") or {}) + len(c.get("binaryData") or {})),
        ("Age", "string", 0, _created),
    ],
    "events": [
        (
            "Last Seen",
            "string",
            0,
            lambda e: _age(e.get("lastTimestamp") or _meta(e).get("creationTimestamp")),
        ),
        ("Type", "string", 0, lambda e: e.get("type", "")),
        ("Reason", "string", 0, lambda e: e.get("reason", "")),
        ("Object", "string", 0, _event_object),
        ("Message", "string", 0, lambda e: e.get("message", "")),
        ("Subobject", "string", 1, lambda e: (e.get("involvedObject") or {}).get("fieldPath", "")),
        (
            "Source",
            "string",
            1,
            lambda e: ", ".join(
                v
                for v in (
                    (e.get("source") or {}).get("component", ""),
                    (e.get("source") or {}).get("host", ""),
                )
                if v
            ),
        ),
        ("First Seen", "string", 1, lambda e: _age(e.get("firstTimestamp"))),
        ("Count", "string", 1, lambda e: str(e.get("count", 1))),
        ("Name", "string", 1, _name),
    ],
    "networkpolicies": [
        ("Name", "string", 0, _name),
        (
            "Pod-Selector",
            "string",
            0,
            lambda n: (
                ",".join(
                    f"{k}={v}"
                    for k, v in (
                        ((n.get("spec") or {}).get("podSelector") or {}).get("matchLabels") or {}
                    ).items()
                )
                or "<none>"
            ),
        ),
        ("Age", "string", 0, _created),
    ],
}
DEFAULT_COLUMNS: list[Column] = [("Name", "string", 0, _name), ("Age", "string", 0, _created)]


def wants_table(accept: str) -> bool:
    return "as=table" in accept.replace(" ", "").lower()


def to_table(
    rt: ResourceType, items: list[Obj], include_object: str, list_meta: Obj | None = None
) -> Obj:
    columns = COLUMNS.get(rt.plural, DEFAULT_COLUMNS)
    rows = []
    for item in items:
        row: Obj = {"cells": [cell(item) for _, _, _, cell in columns]}
        if include_object == "Object":
            row["object"] = {"kind": rt.kind, "apiVersion": rt.api_version, **item}
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": _meta(item),
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta or {},
        "columnDefinitions": [
            {
                "name": name,
                "type": kind,
                "format": "name" if name == "Name" else "",
                "description": f"{name} (kube emulator, development stand-in)",
                "priority": priority,
            }
            for name, kind, priority, _ in columns
        ],
        "rows": rows,
    }
