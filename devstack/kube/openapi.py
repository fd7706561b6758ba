"""A minimal OpenAPI v3 surface for the Kubernetes API emulator (a development stand-in).

``kubectl create/apply`` validate manifests by default; they skip their own (OpenAPI v2 based)
validation when the server advertises the ``fieldValidation`` query parameter on each kind's
PATCH operation in ``/openapi/v3``. These documents carry exactly that — paths, operations and
the group-version-kind extensions — and no schemas (``/openapi/v2`` stays 404).
"""

from __future__ import annotations

from typing import Any

from .resources import ALL_RESOURCES, ResourceType, group_versions

_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "pretty", "force")


def _group_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def root() -> dict[str, Any]:
    pairs = [("", "v1"), *group_versions()]
    return {
        "paths": {
            _group_path(g, v): {
                "serverRelativeURL": f"/openapi/v3/{_group_path(g, v)}?hash=starverse-emulator"
            }
            for g, v in pairs
        }
    }


def _operation(rt: ResourceType, action: str, params: tuple[str, ...]) -> dict[str, Any]:
    return {
        "operationId": f"{action}{rt.kind}",
        "description": f"{action} {rt.kind} (kube emulator, development stand-in)",
        "parameters": [
            {"name": name, "in": "query", "schema": {"type": "string"}} for name in params
        ],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": rt.group,
            "version": rt.version,
            "kind": rt.kind,
        },
    }


def group_version_document(path: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document for ``api/v1`` or ``apis/{group}/{version}``."""
    parts = path.strip("/").split("/")
    if parts[:1] == ["api"] and len(parts) == 2:
        group, version = "", parts[1]
    elif parts[:1] == ["apis"] and len(parts) == 3:
        group, version = parts[1], parts[2]
    else:
        return None
    members = [rt for rt in ALL_RESOURCES if rt.group == group and rt.version == version]
    if not members:
        return None
    prefix = "/" + _group_path(group, version)
    paths: dict[str, Any] = {}
    for rt in members:
        scope = f"{prefix}/namespaces/{{namespace}}" if rt.namespaced else prefix
        paths[f"{scope}/{rt.plural}"] = {
            "get": _operation(rt, "list", ("labelSelector", "fieldSelector", "watch")),
            "post": _operation(rt, "post", _QUERY_PARAMS[:4]),
        }
        paths[f"{scope}/{rt.plural}/{{name}}"] = {
            "get": _operation(rt, "get", ("pretty",)),
            "put": _operation(rt, "put", _QUERY_PARAMS[:4]),
            "patch": _operation(rt, "patch", _QUERY_PARAMS),
            "delete": _operation(
                rt, "delete", ("dryRun", "gracePeriodSeconds", "propagationPolicy")
            ),
        }
    return {
        "openapi": "3.0.0",
        "info": {
            "title": "Starverse kube emulator (development stand-in)",
            "version": "v0",
        },
        "paths": paths,
        "components": {"schemas": {}},
    }
