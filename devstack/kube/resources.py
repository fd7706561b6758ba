"""The resource types the Kubernetes API emulator (a development stand-in) serves, and the
discovery documents (``/api``, ``/apis``, ``/api/v1`` ...) that ``kubectl`` reads first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    plural: str
    singular: str
    kind: str
    group: str
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    categories: tuple[str, ...] = ()
    # DELETE answers with the deleted object (not a Status) once it is gone, like the real
    # registry does for pods, services and claims.
    returns_deleted_object: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def key(self) -> str:
        """Store key: the plural qualified by its group."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


PODS = ResourceType(
    "pods", "pod", "Pod", "", "v1", True, ("po",), True, ("all",), returns_deleted_object=True
)
SERVICES = ResourceType(
    "services",
    "service",
    "Service",
    "",
    "v1",
    True,
    ("svc",),
    True,
    ("all",),
    returns_deleted_object=True,
)
PVCS = ResourceType(
    "persistentvolumeclaims",
    "persistentvolumeclaim",
    "PersistentVolumeClaim",
    "",
    "v1",
    True,
    ("pvc",),
    True,
    returns_deleted_object=True,
)
SECRETS = ResourceType("secrets", "secret", "Secret", "", "v1", True)
CONFIGMAPS = ResourceType("configmaps", "configmap", "ConfigMap", "", "v1", True, ("cm",))
SERVICE_ACCOUNTS = ResourceType(
    "serviceaccounts", "serviceaccount", "ServiceAccount", "", "v1", True, ("sa",)
)
EVENTS = ResourceType("events", "event", "Event", "", "v1", True, ("ev",))
NAMESPACES = ResourceType("namespaces", "namespace", "Namespace", "", "v1", False, ("ns",), True)
NODES = ResourceType("nodes", "node", "Node", "", "v1", False, ("no",), True)
NETWORK_POLICIES = ResourceType(
    "networkpolicies",
    "networkpolicy",
    "NetworkPolicy",
    "networking.k8s.io",
    "v1",
    True,
    ("netpol",),
)
LEASES = ResourceType("leases", "lease", "Lease", "coordination.k8s.io", "v1", True)
# Gateway API routes (a CRD on a real cluster: the gateway's proxy reads them).
HTTP_ROUTES = ResourceType(
    "httproutes", "httproute", "HTTPRoute", "gateway.networking.k8s.io", "v1", True
)
RBAC_GROUP = "rbac.authorization.k8s.io"
ROLES = ResourceType("roles", "role", "Role", RBAC_GROUP, "v1", True)
ROLE_BINDINGS = ResourceType("rolebindings", "rolebinding", "RoleBinding", RBAC_GROUP, "v1", True)
CLUSTER_ROLES = ResourceType("clusterroles", "clusterrole", "ClusterRole", RBAC_GROUP, "v1", False)
CLUSTER_ROLE_BINDINGS = ResourceType(
    "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", RBAC_GROUP, "v1", False
)

DEPLOYMENTS = ResourceType(
    "deployments", "deployment", "Deployment", "apps", "v1", True, ("deploy",), True, ("all",)
)
REPLICASETS = ResourceType(
    "replicasets", "replicaset", "ReplicaSet", "apps", "v1", True, ("rs",), True, ("all",)
)
# CSI snapshots (CRDs of the external-snapshotter on a real cluster).
SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
VOLUME_SNAPSHOT_CLASSES = ResourceType(
    "volumesnapshotclasses",
    "volumesnapshotclass",
    "VolumeSnapshotClass",
    SNAPSHOT_GROUP,
    "v1",
    False,
    ("vsclass", "vsclasses"),
)
VOLUME_SNAPSHOTS = ResourceType(
    "volumesnapshots", "volumesnapshot", "VolumeSnapshot", SNAPSHOT_GROUP, "v1", True, ("vs",), True
)
VOLUME_SNAPSHOT_CONTENTS = ResourceType(
    "volumesnapshotcontents",
    "volumesnapshotcontent",
    "VolumeSnapshotContent",
    SNAPSHOT_GROUP,
    "v1",
    False,
    ("vsc", "vscs"),
    True,
)
# The KEDA HTTP add-on's scaler object (a CRD on a real cluster; :mod:`.keda` stands in).
HTTP_SCALED_OBJECTS = ResourceType(
    "httpscaledobjects",
    "httpscaledobject",
    "HTTPScaledObject",
    "http.keda.sh",
    "v1alpha1",
    True,
    ("httpso",),
    True,
)

ALL_RESOURCES: tuple[ResourceType, ...] = (
    NAMESPACES,
    NODES,
    PODS,
    SERVICES,
    PVCS,
    SECRETS,
    CONFIGMAPS,
    SERVICE_ACCOUNTS,
    EVENTS,
    NETWORK_POLICIES,
    LEASES,
    HTTP_ROUTES,
    ROLES,
    ROLE_BINDINGS,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
    DEPLOYMENTS,
    REPLICASETS,
    VOLUME_SNAPSHOT_CLASSES,
    VOLUME_SNAPSHOTS,
    VOLUME_SNAPSHOT_CONTENTS,
    HTTP_SCALED_OBJECTS,
)

_BY_PATH: dict[tuple[str, str, str], ResourceType] = {
    (rt.group, rt.version, rt.plural): rt for rt in ALL_RESOURCES
}

# Subresources listed in discovery: (parent plural, subresource, verbs).
SUBRESOURCES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "pods": (
        ("status", ("get", "patch", "update")),
        ("binding", ("create",)),
        ("log", ("get",)),
    ),
    "nodes": (("status", ("get", "patch", "update")),),
    "namespaces": (("status", ("get", "patch", "update")), ("finalize", ("update",))),
    "services": (("status", ("get", "patch", "update")),),
    "persistentvolumeclaims": (("status", ("get", "patch", "update")),),
    "deployments": (("status", ("get", "patch", "update")), ("scale", ("get", "patch", "update"))),
    "replicasets": (("status", ("get", "patch", "update")), ("scale", ("get", "patch", "update"))),
    "volumesnapshots": (("status", ("get", "patch", "update")),),
    "volumesnapshotcontents": (("status", ("get", "patch", "update")),),
    "httpscaledobjects": (("status", ("get", "patch", "update")),),
}


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_PATH.get((group, version, plural))


def group_versions() -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for rt in ALL_RESOURCES:
        if rt.group and (rt.group, rt.version) not in seen:
            seen.append((rt.group, rt.version))
    return seen


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_doc(group: str, version: str) -> dict[str, Any]:
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {"name": group, "versions": [gv], "preferredVersion": gv}


def api_group_list() -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_doc(g, v) for g, v in group_versions()],
    }


def api_group(group: str) -> dict[str, Any] | None:
    for g, v in group_versions():
        if g == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(g, v)}
    return None


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    members = [rt for rt in ALL_RESOURCES if rt.group == group and rt.version == version]
    if not members:
        return None
    resources: list[dict[str, Any]] = []
    for rt in members:
        entry: dict[str, Any] = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(ALL_VERBS),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub, verbs in SUBRESOURCES.get(rt.plural, ()):
            resources.append(
                {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": {"binding": "Binding", "scale": "Scale"}.get(sub, rt.kind),
                    "verbs": list(verbs),
                    **({"group": "autoscaling", "version": "v1"} if sub == "scale" else {}),
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
