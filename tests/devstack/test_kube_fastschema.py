"""The compiled schema check (devstack.kube.fastschema) against jsonschema itself: for the
objects the platform and the tests create, and for seeded random mutations of them, the check's
yes/no equals jsonschema's; a schema with a keyword the check does not know leaves its kind to
jsonschema alone."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from devstack.kube import fastschema, validation
from devstack.kube.validation import SchemaValidator

NS = "tenant-3f2a"
LABELS = {"app.kubernetes.io/managed-by": "starverse", "starverse.io/instance": "i-7c1d"}
CAPS = {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "SETUID", "SETGID", "SYS_CHROOT"]}
SECURITY = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "seccompProfile": {"type": "RuntimeDefault"},
    "capabilities": CAPS,
}


def _meta(name: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "namespace": NS, "labels": dict(LABELS), **more}


def rank_pod() -> dict[str, Any]:
    """A multi-node cluster's rank pod, shaped as instances.provisioning.manifests.pod makes."""
    resources = {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1024Gi"}
    tools = {"cpu": "500m", "memory": "128Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(
            "c-51-rank-3",
            annotations={"starverse.io/attempt": "0"},
            ownerReferences=[{"apiVersion": "v1", "kind": "Secret", "name": "c-51", "uid": "u-1"}],
        ),
        "spec": {
            "nodeName": "gpu-node-03",
            "hostname": "rank-3",
            "subdomain": "c-51",
            "automountServiceAccountToken": False,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 40,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": 1000},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "tolerationSeconds": 30},
            ],
            "imagePullSecrets": [{"name": "registry-pull"}],
            "initContainers": [
                {
                    "name": "tools",
                    "image": "starverse/init:1.4",
                    "command": ["/init", "install", "/stage"],
                    "resources": {"limits": tools, "requests": dict(tools)},
                    "securityContext": SECURITY,
                    "volumeMounts": [{"name": "tools", "mountPath": "/stage"}],
                }
            ],
            "containers": [
                {
                    "name": "instance",
                    "image": "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-devel",
                    "command": ["/opt/starverse/init"],
                    "args": ["--rank", "3"],
                    "ports": [
                        {"name": "ssh", "containerPort": 22},
                        {"name": "jupyter", "containerPort": 8888, "protocol": "TCP"},
                    ],
                    "env": [
                        {"name": "STARVERSE_RANK", "value": "3"},
                        {"name": "WORLD_SIZE", "value": "128"},
                        {
                            "name": "POD_IP",
                            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                        },
                    ],
                    "resources": {"limits": resources, "requests": dict(resources)},
                    "securityContext": SECURITY,
                    "readinessProbe": {
                        "tcpSocket": {"port": "ssh"},
                        "periodSeconds": 2,
                        "failureThreshold": 3,
                    },
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8888}},
                    "volumeMounts": [
                        {"name": "system", "mountPath": "/usr", "subPath": "usr"},
                        {"name": "tools", "mountPath": "/opt/starverse", "readOnly": True},
                        {"name": "shm", "mountPath": "/dev/shm"},
                        {"name": "access", "mountPath": "/etc/starverse", "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "512Gi"}},
                {"name": "system", "persistentVolumeClaim": {"claimName": "c-51-rank-3-sys"}},
                {"name": "access", "secret": {"secretName": "c-51-access", "defaultMode": 256}},
                {"name": "tools", "emptyDir": {"sizeLimit": "512Mi"}},
                {
                    "name": "hostfile",
                    "configMap": {"name": "c-51-hosts", "items": [{"key": "h", "path": "h"}]},
                },
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "pool", "operator": "In", "values": ["h100"]}
                                ]
                            }
                        ]
                    }
                }
            },
        },
        "status": {
            "phase": "Running",
            "podIP": "10.244.3.7",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-02T03:04:05Z"}
            ],
        },
    }


def _template(name: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "containers": [
                {
                    "name": "engine",
                    "image": "vllm/vllm-openai:v0.6.0",
                    "ports": [{"containerPort": 8000}],
                    "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": 2.5}},
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
    }


def manifests() -> list[dict[str, Any]]:
    """One realistic object of each kind the platform and the emulator's tests write."""
    selector = {"matchLabels": {"app": "engine"}}
    return [
        rank_pod(),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("c-51"),
            "spec": {
                "clusterIP": "None",
                "selector": {"starverse.io/cluster": "c-51"},
                "ports": [
                    {"name": "ssh", "port": 22, "targetPort": "ssh", "protocol": "TCP"},
                    {"port": 8888, "targetPort": 8888, "nodePort": 30222},
                ],
                "type": "NodePort",
                "publishNotReadyAddresses": True,
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("c-51-hosts"),
            "data": {"hostfile": "rank-0 slots=8\nrank-1 slots=8\n"},
            "binaryData": {"blob": "AAEC"},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": _meta("c-51-access"),
            "stringData": {"authorized_keys": "ssh-ed25519 AAAA user@host\n"},
            "data": {"jupyter_token": "dG9rZW4="},
            "immutable": False,
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": _meta("c-51-rank-3-sys"),
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "local-disk",
                "resources": {"requests": {"storage": "200Gi"}},
                "dataSource": {
                    "apiGroup": "snapshot.storage.k8s.io",
                    "kind": "VolumeSnapshot",
                    "name": "base",
                },
            },
            "status": {"phase": "Bound", "capacity": {"storage": "200Gi"}},
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "pv-public", "labels": dict(LABELS)},
            "spec": {
                "capacity": {"storage": "10Ti"},
                "accessModes": ["ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "nfs": {"server": "10.0.0.5", "path": "/export/public", "readOnly": True},
                "claimRef": {"namespace": NS, "name": "public-pool"},
                "mountOptions": ["nfsvers=4.1"],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NS, "labels": {"starverse.io/tenant": "3f2a"}},
            "spec": {"finalizers": ["kubernetes"]},
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta("tenant-isolation"),
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [
                    {"from": [{"podSelector": {}}]},
                    {
                        "from": [{"ipBlock": {"cidr": "192.168.0.0/24"}}],
                        "ports": [{"port": 22, "protocol": "TCP"}, {"port": "http"}],
                    },
                ],
                "egress": [
                    {
                        "to": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                                }
                            }
                        ],
                        "ports": [{"port": 53, "protocol": "UDP"}],
                    },
                    {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}}]},
                ],
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta("starverse-manager"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "manager", "namespace": NS}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta("reader"),
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta("manager"),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta("engine"),
            "spec": {
                "replicas": 3,
                "selector": selector,
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
                },
                "template": _template("engine"),
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": _meta("agent"),
            "spec": {
                "selector": selector,
                "updateStrategy": {"rollingUpdate": {"maxUnavailable": 1}},
                "template": _template("engine"),
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": _meta("train"),
            "spec": {
                "backoffLimit": 0,
                "completions": 1,
                "ttlSecondsAfterFinished": 60,
                "template": {
                    **_template("train"),
                    "spec": {**_template("train")["spec"], "restartPolicy": "Never"},
                },
            },
        },
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": _meta("gpu-node-03", namespace="kube-node-lease"),
            "spec": {
                "holderIdentity": "gpu-node-03",
                "leaseDurationSeconds": 40,
                "renewTime": "2026-01-02T03:04:05.123456Z",
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": _meta("c-51-rank-3.17a"),
            "involvedObject": {"kind": "Pod", "name": "c-51-rank-3", "namespace": NS},
            "reason": "Scheduled",
            "message": "Successfully assigned",
            "type": "Normal",
            "count": 1,
            "firstTimestamp": "2026-01-02T03:04:05Z",
            "source": {"component": "default-scheduler"},
        },
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-node-03", "labels": {"pool": "h100"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
            "status": {
                "capacity": {"nvidia.com/gpu": "8", "cpu": "192", "memory": "2Ti"},
                "allocatable": {"nvidia.com/gpu": 8, "cpu": "190"},
                "addresses": [{"type": "InternalIP", "address": "10.1.0.3"}],
            },
        },
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Widget", "plural": "widgets"},
                "scope": "Namespaced",
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {
                                    "spec": {
                                        "type": "object",
                                        "required": ["size"],
                                        "properties": {
                                            "size": {"type": "integer", "minimum": 1},
                                            "tags": {
                                                "type": "array",
                                                "items": {"type": "string"},
                                            },
                                        },
                                        "additionalProperties": False,
                                    }
                                },
                            }
                        },
                    }
                ],
            },
        },
    ]


# Values a mutation puts in place of another: every JSON type, the int-or-string both ways, a
# whole float and a fractional one, a bool (not an integer), null.
REPLACEMENTS: list[Any] = [
    0,
    7,
    2.0,
    1.5,
    True,
    False,
    None,
    "",
    "x",
    "7",
    "Bogus",
    [],
    ["x"],
    [{"name": "x"}],
    {},
    {"name": "x"},
    {"bogus": 1},
]


def _containers(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every dict and list inside ``obj``, ``obj`` itself first."""
    if isinstance(obj, dict | list):
        yield path
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for key, value in items:
            yield from _containers(value, (*path, key))


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def mutate(obj: dict[str, Any], rng: random.Random) -> None:
    """One random change in place: a key dropped, a value replaced, an unknown field added,
    a string turned into a number or back, or a list item added or replaced."""
    paths = list(_containers(obj))
    parent = _at(obj, rng.choice(paths))
    action = rng.randrange(6)
    if isinstance(parent, list):
        if action < 3 or not parent:
            parent.append(copy.deepcopy(rng.choice(REPLACEMENTS)))
        else:
            parent[rng.randrange(len(parent))] = copy.deepcopy(rng.choice(REPLACEMENTS))
        return
    if not parent or action == 0:
        parent[rng.choice(["bogus", "status", "spec", "name", "value"])] = copy.deepcopy(
            rng.choice(REPLACEMENTS)
        )
        return
    key = rng.choice(list(parent))
    value = parent[key]
    if action == 1:
        del parent[key]
    elif action == 2 and isinstance(value, str):
        parent[key] = int(value) if value.isdigit() else rng.choice([80, 1.0, "Bogus"])
    elif action == 3 and isinstance(value, int | float) and not isinstance(value, bool):
        parent[key] = str(value)
    else:
        parent[key] = copy.deepcopy(rng.choice(REPLACEMENTS))


@pytest.fixture(scope="module")
def schemas() -> SchemaValidator:
    return SchemaValidator()


def _both(
    schemas: SchemaValidator, obj: dict[str, Any], of: dict[str, Any] | None = None
) -> tuple[bool, bool]:
    """(the compiled check's verdict, jsonschema's) for ``obj``, with the schema of the kind
    of ``of`` (a mutation may have changed the kind of ``obj``)."""
    of = obj if of is None else of
    kind = schemas.schema_for(str(of["kind"]), str(of["apiVersion"]))
    assert kind is not None and kind.check is not None
    return kind.check(obj), not list(kind.validator.iter_errors(obj))


@pytest.mark.parametrize("manifest", manifests(), ids=lambda m: m["kind"])
def test_the_check_agrees_with_jsonschema_on_each_kind(
    schemas: SchemaValidator, manifest: dict[str, Any]
) -> None:
    assert _both(schemas, manifest) == (True, True)


@pytest.mark.parametrize("manifest", manifests(), ids=lambda m: m["kind"])
def test_the_check_agrees_with_jsonschema_on_random_mutations(
    schemas: SchemaValidator, manifest: dict[str, Any]
) -> None:
    rng = random.Random(f"fastschema-{manifest['kind']}")
    verdicts = {True: 0, False: 0}
    for attempt in range(250):
        obj = copy.deepcopy(manifest)
        for _ in range(1 + attempt % 3):
            mutate(obj, rng)
        fast, slow = _both(schemas, obj, manifest)
        assert fast == slow, obj
        verdicts[slow] += 1
    # the mutations reach both answers, so the comparison above tests something
    assert verdicts[True] >= 10 and verdicts[False] >= 50, verdicts


# Targeted cases, each checked against jsonschema and against the answer JSON Schema gives (the
# strict schemas' enums are their apiVersion and kind).
CASES: list[tuple[str, Any, Any, bool]] = [
    ("pod", ("spec", "terminationGracePeriodSeconds"), 40.0, True),
    ("pod", ("spec", "terminationGracePeriodSeconds"), True, False),
    ("pod", ("spec", "terminationGracePeriodSeconds"), 40.5, False),
    ("pod", ("spec", "terminationGracePeriodSeconds"), None, True),
    ("pod", ("spec", "containers", 0, "ports", 0, "containerPort"), "22", False),
    ("pod", ("spec", "containers", 0, "readinessProbe", "tcpSocket", "port"), 22, True),
    ("pod", ("spec", "containers", 0, "readinessProbe", "tcpSocket", "port"), 22.0, True),
    ("pod", ("spec", "containers", 0, "readinessProbe", "tcpSocket", "port"), 2.5, False),
    ("pod", ("spec", "containers", 0, "readinessProbe", "tcpSocket", "port"), None, False),
    ("pod", ("spec", "containers", 0, "readinessProbe", "tcpSocket", "port"), True, False),
    ("pod", ("spec", "containers", 0, "resources", "limits", "cpu"), 1.5, True),
    ("pod", ("spec", "containers", 0, "resources", "limits", "cpu"), None, False),
    ("pod", ("spec", "containers", 0, "resources", "limits", "cpu"), False, False),
    ("pod", ("apiVersion",), None, False),
    ("pod", ("apiVersion",), "v2", False),
    ("pod", ("kind",), "Pod", True),
    ("pod", ("kind",), "Service", False),
    ("pod", ("kind",), None, False),
    ("pod", ("spec", "hostname"), None, True),
    ("pod", ("spec", "hostname"), 3, False),
    ("pod", ("spec", "containers", 0, "name"), None, False),
    ("pod", ("metadata", "labels", "x"), None, True),
    ("pod", ("metadata", "labels", "x"), 1, False),
    ("pod", ("spec", "containers", 0, "bogus"), 1, False),
]


@pytest.mark.parametrize(("kind", "path", "value", "valid"), CASES)
def test_the_check_keeps_json_schema_semantics(
    schemas: SchemaValidator, kind: str, path: tuple[Any, ...], value: Any, valid: bool
) -> None:
    obj = rank_pod()
    _at(obj, path[:-1])[path[-1]] = value
    assert _both(schemas, obj, rank_pod()) == (valid, valid)


def test_a_recursive_definition_is_checked_at_every_depth(schemas: SchemaValidator) -> None:
    crd = next(m for m in manifests() if m["kind"] == "CustomResourceDefinition")
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert _both(schemas, crd) == (True, True)
    spec["properties"]["size"]["minimum"] = "one"  # a number, deep in the recursion
    assert _both(schemas, crd) == (False, False)


def test_json_equal_keeps_booleans_apart_from_numbers() -> None:
    assert fastschema.json_equal(1, 1.0)
    assert not fastschema.json_equal(True, 1)
    assert not fastschema.json_equal(0, False)
    assert fastschema.json_equal([1, {"a": True}], [1.0, {"a": True}])
    assert not fastschema.json_equal([1, {"a": True}], [1, {"a": 1}])
    assert not fastschema.json_equal("1", 1)


def test_a_small_schema_with_every_keyword_agrees_with_jsonschema() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://example.test/root",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"next": {"$ref": "#/$defs/node"}, "v": {"enum": [1, "a", None]}},
                "additionalProperties": {"type": "boolean"},
            }
        },
        "type": "object",
        "required": ["tree"],
        "properties": {
            "tree": {"$ref": "#/$defs/node"},
            "n": {"allOf": [{"type": "number"}, {"not": {"type": "integer"}}]},
            "m": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "null"}}]},
        },
        "additionalProperties": False,
    }
    registry: Registry[Any] = Resource.from_contents(schema) @ Registry()
    check = fastschema.compile_check(schema, registry)
    slow = jsonschema.Draft202012Validator(schema, registry=registry)
    cases = [
        {"tree": {}},
        {"tree": {"next": {"next": {"v": 1.0}}}},
        {"tree": {"next": {"next": {"v": True}}}},
        {"tree": {"v": None, "flag": True}},
        {"tree": {"flag": 1}},
        {"tree": {}, "n": 1.5},
        {"tree": {}, "n": 2.0},
        {"tree": {}, "m": "s"},
        {"tree": {}, "m": [None, None]},
        {"tree": {}, "m": [None, 0]},
        {"tree": {}, "other": 1},
        {"n": 1.5},
    ]
    assert [check(case) for case in cases] == [slow.is_valid(case) for case in cases]
    assert [check(case) for case in cases] == [
        True,
        True,
        False,
        True,
        False,
        True,
        False,
        True,
        True,
        False,
        False,
        False,
    ]


def test_an_unsupported_keyword_is_refused_where_it_is_reached() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://example.test/root",
        "$defs": {"name": {"type": "string", "pattern": "^[a-z]+$"}},
        "properties": {"name": {"$ref": "#/$defs/name"}},
    }
    registry: Registry[Any] = Resource.from_contents(schema) @ Registry()
    with pytest.raises(fastschema.Unsupported, match="pattern"):
        fastschema.compile_check(schema, registry)


def test_a_kind_with_an_unsupported_keyword_falls_back_to_jsonschema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    contents = validation.kv_utils.schema_contents

    def with_max_properties(path: str, version: str) -> Any:
        schema = contents(path, version)
        if path.endswith("/configmap-v1.json"):
            return {**schema, "maxProperties": 3}
        return schema

    monkeypatch.setattr(validation.kv_utils, "schema_contents", with_max_properties)
    schemas = SchemaValidator()
    config_map = next(m for m in manifests() if m["kind"] == "ConfigMap")
    kind = schemas.schema_for("ConfigMap", "v1")
    assert kind is not None and kind.check is None
    assert [e.validator for e in schemas.errors(config_map)] == ["maxProperties"]
    assert schemas.errors({k: config_map[k] for k in ("apiVersion", "kind", "metadata")}) == []
    secret = schemas.schema_for("Secret", "v1")  # the other kinds keep their check
    assert secret is not None and secret.check is not None
