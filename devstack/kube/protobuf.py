"""Decoding of the protobuf request bodies ``kubectl``'s typed generators send (``kubectl create
namespace|configmap|secret|service``) for the Kubernetes API emulator (a development stand-in).

Only the kinds and fields those generators write are mapped; any other protobuf body is answered
with 415 so the caller can send JSON instead. Responses are always JSON.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

from .errors import ApiError, bad_request

PROTOBUF = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"

# field number -> (json name, kind, nested schema); kinds: s (string), b (bytes → base64),
# i (int), ? (bool), m (message), ms (map string→string), mb (map string→bytes), t (time),
# ios (IntOrString); a trailing "*" marks a repeated field, a trailing "0" a field whose zero
# value is kept.
Schema = dict[int, tuple[str, str, Any]]

TIME: Schema = {}
OWNER_REF: Schema = {
    1: ("kind", "s", None),
    3: ("name", "s", None),
    4: ("uid", "s", None),
    5: ("apiVersion", "s", None),
    6: ("controller", "?", None),
    7: ("blockOwnerDeletion", "?", None),
}
OBJECT_META: Schema = {
    1: ("name", "s", None),
    2: ("generateName", "s", None),
    3: ("namespace", "s", None),
    5: ("uid", "s", None),
    6: ("resourceVersion", "s", None),
    7: ("generation", "i", None),
    8: ("creationTimestamp", "t", None),
    9: ("deletionTimestamp", "t", None),
    10: ("deletionGracePeriodSeconds", "i", None),
    11: ("labels", "ms", None),
    12: ("annotations", "ms", None),
    13: ("ownerReferences", "m*", OWNER_REF),
    14: ("finalizers", "s*", None),
}
SERVICE_PORT: Schema = {
    1: ("name", "s", None),
    2: ("protocol", "s", None),
    3: ("port", "i", None),
    4: ("targetPort", "ios", None),
    5: ("nodePort", "i", None),
    6: ("appProtocol", "s", None),
}
SERVICE_SPEC: Schema = {
    1: ("ports", "m*", SERVICE_PORT),
    2: ("selector", "ms", None),
    3: ("clusterIP", "s", None),
    4: ("type", "s", None),
    5: ("externalIPs", "s*", None),
    7: ("sessionAffinity", "s", None),
    8: ("loadBalancerIP", "s", None),
    9: ("loadBalancerSourceRanges", "s*", None),
    10: ("externalName", "s", None),
    11: ("externalTrafficPolicy", "s", None),
    12: ("healthCheckNodePort", "i", None),
    13: ("publishNotReadyAddresses", "?", None),
}
DELETE_OPTIONS: Schema = {
    1: ("gracePeriodSeconds", "i0", None),
    2: ("preconditions", "m", {1: ("uid", "s", None), 2: ("resourceVersion", "s", None)}),
    3: ("orphanDependents", "?0", None),
    4: ("propagationPolicy", "s", None),
    5: ("dryRun", "s*", None),
}
KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "DeleteOptions"): DELETE_OPTIONS,
    ("meta.k8s.io/v1", "DeleteOptions"): DELETE_OPTIONS,
    ("v1", "Namespace"): {
        1: ("metadata", "m", OBJECT_META),
        2: ("spec", "m", {1: ("finalizers", "s*", None)}),
    },
    ("v1", "ConfigMap"): {
        1: ("metadata", "m", OBJECT_META),
        2: ("data", "ms", None),
        3: ("binaryData", "mb", None),
        4: ("immutable", "?", None),
    },
    ("v1", "Secret"): {
        1: ("metadata", "m", OBJECT_META),
        2: ("data", "mb", None),
        3: ("type", "s", None),
        4: ("stringData", "ms", None),
        5: ("immutable", "?", None),
    },
    ("v1", "Service"): {1: ("metadata", "m", OBJECT_META), 2: ("spec", "m", SERVICE_SPEC)},
}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise bad_request("truncated protobuf body")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    pos = 0
    out: list[tuple[int, int | bytes]] = []
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            out.append((number, data[pos : pos + length]))
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise bad_request(f"unsupported protobuf wire type {wire}")
    return out


def _time(raw: bytes) -> str | None:
    seconds = dict(_fields(raw)).get(1)
    if not isinstance(seconds, int) or seconds == 0:
        return None
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _map_entry(raw: bytes, binary: bool) -> tuple[str, str]:
    entry = dict(_fields(raw))
    key = entry.get(1, b"")
    value = entry.get(2, b"")
    key_text = key.decode() if isinstance(key, bytes) else str(key)
    if binary:
        return key_text, base64.b64encode(value if isinstance(value, bytes) else b"").decode()
    return key_text, value.decode() if isinstance(value, bytes) else str(value)


def _int_or_string(raw: bytes) -> int | str:
    fields = dict(_fields(raw))
    if fields.get(1) == 1:
        value = fields.get(3, b"")
        return value.decode() if isinstance(value, bytes) else str(value)
    value = fields.get(2, 0)
    return value if isinstance(value, int) else 0


def _decode(raw: bytes, schema: Schema) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(raw):
        if number not in schema:
            continue
        name, kind, nested = schema[number]
        repeated = kind.endswith("*")
        keep_zero = kind.endswith("0")  # proto2 presence matters (gracePeriodSeconds: 0)
        kind = kind.rstrip("*0")
        if kind == "ms" or kind == "mb":
            if isinstance(value, bytes):
                key, text = _map_entry(value, kind == "mb")
                obj.setdefault(name, {})[key] = text
            continue
        if kind == "s":
            item: Any = value.decode() if isinstance(value, bytes) else str(value)
        elif kind == "i":
            item = value if isinstance(value, int) else 0
            if item >= 1 << 63:
                item -= 1 << 64
        elif kind == "?":
            item = bool(value)
        elif kind == "t":
            item = _time(value) if isinstance(value, bytes) else None
        elif kind == "ios":
            item = _int_or_string(value) if isinstance(value, bytes) else None
        else:
            item = _decode(value, nested) if isinstance(value, bytes) else {}
        if repeated:
            if item not in (None, ""):
                obj.setdefault(name, []).append(item)
        elif keep_zero or item not in (None, "", 0, False, {}):
            obj[name] = item
    return obj


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf-encoded object (``k8s\\x00`` + runtime.Unknown) as its JSON form."""
    if not body.startswith(_MAGIC):
        raise bad_request("protobuf body without the k8s magic prefix")
    envelope = dict(_fields(body[len(_MAGIC) :]))
    type_meta = dict(_fields(envelope.get(1, b"") or b""))  # type: ignore[arg-type]
    api_version = (type_meta.get(1) or b"").decode()  # type: ignore[union-attr]
    kind = (type_meta.get(2) or b"").decode()  # type: ignore[union-attr]
    schema = KINDS.get((api_version, kind))
    if schema is None:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the kube emulator (a development stand-in) cannot decode protobuf {kind or 'bodies'}"
            f" ({api_version}); send JSON or YAML instead (kubectl create -f / apply -f)",
            {},
        )
    raw = envelope.get(2, b"")
    obj = _decode(raw if isinstance(raw, bytes) else b"", schema)
    return {"apiVersion": api_version, "kind": kind, **obj}
