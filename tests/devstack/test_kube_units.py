"""Unit tests of the kube emulator's pure parts: patches, selectors, quantities, protobuf."""

from __future__ import annotations

from fractions import Fraction

import pytest

from devstack.kube.errors import ApiError
from devstack.kube.fleet import build_fleet, parse_fleet
from devstack.kube.patch import json_patch, merge_patch, strategic_merge
from devstack.kube.protobuf import decode
from devstack.kube.quantity import QuantityError, parse_quantity
from devstack.kube.selectors import make_filter, node_selector_term_matches, parse_label_selector


def test_merge_patch_follows_rfc_7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "list": [1, 2]}
    patch = {"a": "z", "c": {"f": None}, "list": [3], "new": {"x": None, "y": 1}}
    assert merge_patch(target, patch) == {
        "a": "z",
        "c": {"d": "e"},
        "list": [3],
        "new": {"y": 1},
    }
    assert target["c"] == {"d": "e", "f": "g"}  # the input is not mutated


def test_strategic_merge_uses_merge_keys_and_directives() -> None:
    target = {
        "metadata": {"finalizers": ["a"]},
        "spec": {
            "containers": [
                {"name": "main", "image": "x:1", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "y:1"},
            ],
            "tolerations": [{"key": "k1"}],
            "volumes": [{"name": "v1"}, {"name": "v2"}],
        },
    }
    patch = {
        "metadata": {"finalizers": ["b", "a"]},
        "spec": {
            "containers": [
                {"name": "main", "env": [{"name": "B", "value": "2"}]},
                {"name": "side", "$patch": "delete"},
                {"name": "new", "image": "z:1"},
            ],
            "tolerations": [{"key": "k2"}],
            "volumes": [{"name": "v2", "$patch": "delete"}],
            "$setElementOrder/containers": [{"name": "main"}, {"name": "new"}],
        },
    }
    result = strategic_merge(target, patch)
    assert result["metadata"]["finalizers"] == ["a", "b"]
    assert result["spec"]["containers"] == [
        {
            "name": "main",
            "image": "x:1",
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        },
        {"name": "new", "image": "z:1"},
    ]
    assert result["spec"]["tolerations"] == [{"key": "k2"}]  # atomic list: replaced
    assert result["spec"]["volumes"] == [{"name": "v1"}]
    replaced = strategic_merge(
        target, {"spec": {"volumes": [{"$patch": "replace"}, {"name": "z"}]}}
    )
    assert replaced["spec"]["volumes"] == [{"name": "z"}]
    trimmed = strategic_merge(target, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert trimmed["metadata"]["finalizers"] == []
    assert strategic_merge(target, {"spec": {"$patch": "replace", "x": 1}})["spec"] == {"x": 1}


def test_service_ports_merge_on_port() -> None:
    target = {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}}
    result = strategic_merge(target, {"spec": {"ports": [{"port": 443, "nodePort": 30443}]}})
    assert result["spec"]["ports"] == [
        {"port": 80, "name": "http"},
        {"port": 443, "name": "https", "nodePort": 30443},
    ]


def test_json_patch_follows_rfc_6902() -> None:
    doc = {"a": {"b": [1, 2, 3]}, "c~d": 1, "e/f": 2}
    result = json_patch(
        doc,
        [
            {"op": "add", "path": "/a/b/1", "value": 9},
            {"op": "add", "path": "/a/b/-", "value": 10},
            {"op": "remove", "path": "/c~0d"},
            {"op": "replace", "path": "/e~1f", "value": 3},
            {"op": "move", "from": "/a/b/0", "path": "/first"},
            {"op": "copy", "from": "/first", "path": "/again"},
            {"op": "test", "path": "/a/b", "value": [9, 2, 3, 10]},
        ],
    )
    assert result == {"a": {"b": [9, 2, 3, 10]}, "e/f": 3, "first": 1, "again": 1}
    with pytest.raises(ApiError) as caught:
        json_patch(doc, [{"op": "test", "path": "/c~0d", "value": 2}])
    assert (caught.value.code, caught.value.reason) == (422, "Invalid")
    with pytest.raises(ApiError) as caught:
        json_patch(doc, [{"op": "replace", "path": "/missing", "value": 1}])
    assert caught.value.code == 422
    with pytest.raises(ApiError) as caught:
        json_patch(doc, [{"op": "frobnicate", "path": "/a"}])
    assert caught.value.code == 400
    with pytest.raises(ApiError) as caught:
        json_patch(doc, {"op": "add"})
    assert caught.value.code == 400


def test_label_selector_parsing_and_matching() -> None:
    requirements = parse_label_selector("app=web, tier in (a, b),!legacy,env!=prod,gpu")
    assert [(r.key, r.op, r.values) for r in requirements] == [
        ("app", "=", ("web",)),
        ("tier", "in", ("a", "b")),
        ("legacy", "!", ()),
        ("env", "!=", ("prod",)),
        ("gpu", "exists", ()),
    ]
    matches = make_filter("pods", "app=web,tier notin (c)", None)
    assert matches({"metadata": {"labels": {"app": "web"}}})
    assert not matches({"metadata": {"labels": {"app": "web", "tier": "c"}}})
    assert make_filter("pods", "app=", None)({"metadata": {"labels": {"app": ""}}})
    for bad in ("=x", "a in (b", "bad key=1", "a in ()", "a=b c"):
        with pytest.raises(ApiError):
            parse_label_selector(bad)


def test_field_selector_reads_nested_fields_and_escapes() -> None:
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"name": "a,b", "kind": "Pod"},
        "source": {"component": "kubelet"},
    }
    assert make_filter("events", None, r"involvedObject.name=a\,b,source=kubelet")(event)
    assert not make_filter("events", None, "involvedObject.kind!=Pod")(event)
    assert make_filter("events", None, "involvedObject.namespace=")(event)
    with pytest.raises(ApiError) as caught:
        make_filter("configmaps", None, "data.k=v")
    assert caught.value.message == "field label not supported: data.k"


def test_node_selector_terms() -> None:
    node = {"metadata": {"name": "n1", "labels": {"gpus": "8", "zone": "a"}}}
    assert node_selector_term_matches(
        {"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["4"]}]}, node
    )
    assert not node_selector_term_matches(
        {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, node
    )
    assert node_selector_term_matches(
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, node
    )
    assert not node_selector_term_matches({}, node)


def test_quantities() -> None:
    assert parse_quantity("500m") == Fraction(1, 2)
    assert parse_quantity("2Gi") == 2 * 2**30
    assert parse_quantity("1G") == 10**9
    assert parse_quantity("1e3") == 1000
    assert parse_quantity(8) == 8
    assert parse_quantity("0.5") == Fraction(1, 2)
    with pytest.raises(QuantityError):
        parse_quantity("eight")


def test_fleet_parsing_and_profiles() -> None:
    assert parse_fleet("h100=2, a100=1,rtx4090=0,cpu") == {
        "h100": 2,
        "a100": 1,
        "rtx4090": 0,
        "cpu": 1,
    }
    with pytest.raises(ValueError, match="unknown node profile"):
        parse_fleet("tpu=1")
    nodes = build_fleet({"a100": 1, "cpu": 1})
    assert [(n.name, n.gpu_product, n.gpu_count, n.taints) for n in nodes] == [
        (
            "gpu-a100-0",
            "NVIDIA-A100-SXM4-80GB",
            8,
            [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        ),
        ("cpu-0", "", 0, []),
    ]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def test_protobuf_bodies_of_kubectl_generators_decode_to_json() -> None:
    meta = _field(1, b"web") + _field(11, _field(1, b"app") + _field(2, b"web"))
    port = (
        _field(1, b"80-8080")
        + _field(2, b"TCP")
        + _field(3, 80)
        + _field(4, _field(1, 0) + _field(2, 8080))
    )
    spec = (
        _field(1, port) + _field(2, _field(1, b"app") + _field(2, b"web")) + _field(4, b"NodePort")
    )
    body = (
        b"k8s\x00"
        + _field(1, _field(1, b"v1") + _field(2, b"Service"))
        + _field(2, _field(1, meta) + _field(2, spec))
    )
    assert decode(body) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "ports": [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}],
            "selector": {"app": "web"},
            "type": "NodePort",
        },
    }
    secret = (
        b"k8s\x00"
        + _field(1, _field(1, b"v1") + _field(2, b"Secret"))
        + _field(2, _field(1, _field(1, b"s")) + _field(2, _field(1, b"a") + _field(2, b"b")))
    )
    assert decode(secret) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "data": {"a": "Yg=="},
    }
    job = b"k8s\x00" + _field(1, _field(1, b"batch/v1") + _field(2, b"Job"))
    with pytest.raises(ApiError) as caught:
        decode(job)
    assert caught.value.code == 415
