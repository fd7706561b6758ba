"""PATCH bodies for the Kubernetes API emulator (a development stand-in).

* ``application/merge-patch+json``: RFC 7386 JSON merge patch.
* ``application/strategic-merge-patch+json``: Kubernetes strategic merge for the list fields
  whose Go types carry a patch merge key (containers, volumes, env, ports, ...), with the
  ``$patch: delete|replace``, ``$deleteFromPrimitiveList/`` and ``$setElementOrder/``
  directives. Lists without a merge key (tolerations, args, taints ...) are replaced whole,
  as on a real apiserver.
* ``application/json-patch+json``: RFC 6902 (add, remove, replace, move, copy, test).
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import ApiError, bad_request

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# List fields merged by key; every other list is atomic (replaced).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "env": "name",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "ownerReferences": "uid",
    "conditions": "type",
    "addresses": "type",
}
# Lists of scalars merged as sets.
PRIMITIVE_MERGE = frozenset({"finalizers"})


class PatchError(ApiError):
    pass


def _unprocessable(message: str) -> PatchError:
    return PatchError(422, "Invalid", message, {})


# --- RFC 7386 ------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- strategic merge -----------------------------------------------------------------------


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if not (k == "$patch" or k == "$retainKeys" or k.startswith("$"))
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value if not (isinstance(v, dict) and "$patch" in v)]
    return value


def _list_key(field: str, old: list[Any], new: list[Any]) -> str | None:
    if field == "ports":
        sample = [i for i in old + new if isinstance(i, dict)]
        return "containerPort" if any("containerPort" in i for i in sample) else "port"
    return MERGE_KEYS.get(field)


def _merge_list(field: str, old: Any, patch: list[Any]) -> list[Any]:
    if not isinstance(old, list):
        old = []
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return _strip_directives([i for i in patch if not (isinstance(i, dict) and "$patch" in i)])
    if field in PRIMITIVE_MERGE:
        merged = list(old)
        merged.extend(item for item in patch if item not in merged)
        return merged
    key = _list_key(field, old, patch)
    if key is None or not all(isinstance(i, dict) for i in patch + old):
        return _strip_directives(patch)
    merged = copy.deepcopy(old)
    for item in patch:
        if key not in item:
            raise bad_request(f"map: {item} does not contain declared merge key: {key}")
        position = next((n for n, cur in enumerate(merged) if cur.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if position is not None:
                merged.pop(position)
            continue
        if position is None:
            merged.append(_strip_directives(item))
        else:
            merged[position] = strategic_merge(merged[position], item)
    return merged


def strategic_merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return _strip_directives(copy.deepcopy(patch))
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives(patch)
    if directive == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if key.startswith("$"):
            raise bad_request(f"unknown patch directive {key!r}")
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = value
    return result


# --- RFC 6902 ------------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], part: str, allow_end: bool, path: str) -> int:
    if part == "-" and allow_end:
        return len(container)
    if not part.isdigit() or (part != "0" and part.startswith("0")):
        raise _unprocessable(f"invalid array index {part!r} in {path}")
    index = int(part)
    limit = len(container) if allow_end else len(container) - 1
    if index > limit:
        raise _unprocessable(f"array index {index} out of bounds in {path}")
    return index


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    current = doc
    for part in parts[:-1]:
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list):
            current = current[_index(current, part, False, path)]
        else:
            raise _unprocessable(f"doc is missing path: {path!r}: missing value")
    return current


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable(f"doc is missing path: {path!r}: missing value")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, False, path)]
    raise _unprocessable(f"doc is missing path: {path!r}: missing value")


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    if isinstance(parent, dict):
        parent[parts[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, parts[-1], True, path), value)
    else:
        raise _unprocessable(f"doc is missing path: {path!r}: missing value")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    parts = _pointer(path)
    if not parts:
        raise _unprocessable("unable to remove the whole document")
    parent = _parent(doc, parts, path)
    if isinstance(parent, dict):
        if parts[-1] not in parent:
            raise _unprocessable(f"unable to remove nonexistent key: {parts[-1]}: missing value")
        return doc, parent.pop(parts[-1])
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, parts[-1], False, path))
    raise _unprocessable(f"doc is missing path: {path!r}: missing value")


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid JSON patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise bad_request(f"operation {kind!r} is missing the 'value' member")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # must exist
            doc, _ = _remove(doc, path) if _pointer(path) else (doc, None)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise _unprocessable(f"testing value {path} failed: test failed")
        elif kind in ("move", "copy"):
            source = op.get("from")
            if source is None:
                raise bad_request(f"operation {kind!r} is missing the 'from' member")
            if kind == "move":
                if path.startswith(source + "/"):
                    raise _unprocessable(f"cannot move {source} into its own child {path}")
                doc, value = _remove(doc, source)
            else:
                value = copy.deepcopy(_get(doc, source))
            doc = _add(doc, path, value)
        else:
            raise bad_request(f"unexpected JSON patch operation {kind!r}")
    return doc


def apply_patch(content_type: str, target: dict[str, Any], body: Any) -> Any:
    """Apply ``body`` to a copy of ``target`` per the request's patch content type."""
    if content_type == JSON_PATCH:
        return json_patch(target, body)
    if not isinstance(body, dict):
        raise bad_request(f"the patch body must be a JSON object for {content_type}")
    if content_type == MERGE_PATCH:
        return merge_patch(target, body)
    return strategic_merge(target, body)
