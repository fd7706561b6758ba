"""Small object helpers shared by the Kubernetes API emulator's (a development stand-in) API
layer and its emulated controllers: conditions, Status bodies, list bookkeeping."""

from __future__ import annotations

import copy
from typing import Any

from . import errors as err
from .defaults import now_iso

# Pod phases after which a pod holds nothing (no resources, no volumes).
TERMINAL = ("Succeeded", "Failed")

Obj = dict[str, Any]


def set_condition(obj: Obj, kind: str, status: str, reason: str = "", message: str = "") -> None:
    """Set a status condition, moving lastTransitionTime only when the status flips."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    for condition in conditions:
        if condition.get("type") == kind:
            if condition.get("status") != status:
                condition["lastTransitionTime"] = now_iso()
            condition["status"] = status
            for key, value in (("reason", reason), ("message", message)):
                if value:
                    condition[key] = value
                else:
                    condition.pop(key, None)
            return
    condition = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": now_iso(),
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    conditions.append(condition)


def success_status(name: str, resource: str, group: str, uid: str = "") -> Obj:
    details: Obj = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    if uid:
        details["uid"] = uid
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def parse_rv(value: str) -> int:
    try:
        return int(value)
    except ValueError as exc:
        raise err.bad_request(f"invalid resource version: {value!r}") from exc


def sort_key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def ns_name(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def strip_type(obj: Obj) -> Obj:
    item = copy.deepcopy(obj)
    item.pop("kind", None)
    item.pop("apiVersion", None)
    return item
