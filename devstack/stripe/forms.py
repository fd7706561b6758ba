"""Decoding of Stripe-style form bodies (``a[b][0][c]=v``) into nested dicts and lists."""

import re
from typing import Any
from urllib.parse import parse_qsl

from .errors import invalid_request

_KEY_PART = re.compile(r"\[([^\[\]]*)\]")


def _split_key(key: str) -> list[str]:
    head, bracket, rest = key.partition("[")
    if not bracket:
        return [key]
    tail = "[" + rest
    parts = _KEY_PART.findall(tail)
    if "".join(f"[{p}]" for p in parts) != tail:
        raise invalid_request(f"Invalid parameter name: {key}", param=key)
    return [head, *parts]


def _listify(node: Any) -> Any:
    """Turn dicts whose keys are all list indices (or ``[]`` appends) into lists, recursively."""
    if isinstance(node, list):
        return [_listify(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _listify(value) for key, value in node.items()}
    if converted and all(isinstance(key, int) for key in converted):
        return [converted[index] for index in sorted(converted)]
    return converted


def decode_form(body: str) -> dict[str, Any]:
    """Decode ``application/x-www-form-urlencoded`` text the way Stripe's API does."""
    root: dict[str, Any] = {}
    for raw_key, value in parse_qsl(body, keep_blank_values=True, strict_parsing=False):
        parts = _split_key(raw_key)
        node: dict[Any, Any] = root
        for depth, part in enumerate(parts):
            key: Any = part
            if depth > 0 and part == "":
                key = len([k for k in node if isinstance(k, int)])
            elif depth > 0 and part.isdigit():
                key = int(part)
            last = depth == len(parts) - 1
            if last:
                if isinstance(node.get(key), dict):
                    raise invalid_request(f"Invalid parameter: {raw_key}", param=raw_key)
                node[key] = value
            else:
                child = node.setdefault(key, {})
                if not isinstance(child, dict):
                    name = "[".join(parts[: depth + 1])
                    raise invalid_request(f"Invalid parameter: {name}", param=raw_key)
                node = child
    result = _listify(root)
    assert isinstance(result, dict)
    return result


def as_int(value: Any, param: str, *, minimum: int | None = None) -> int:
    """Parse an integer parameter, with Stripe's wording when it isn't one."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise invalid_request(f"Invalid integer: {value!r}", param=param)
    try:
        number = int(value)
    except ValueError:
        raise invalid_request(f"Invalid integer: {value}", param=param) from None
    if minimum is not None and number < minimum:
        word = "positive integer" if minimum == 1 else f"integer (at least {minimum})"
        raise invalid_request(f"Invalid {word}", param=param)
    return number


def as_str(value: Any, param: str, *, max_length: int = 5000) -> str:
    if not isinstance(value, str):
        raise invalid_request(f"Invalid string: {param} must be a string", param=param)
    if len(value) > max_length:
        raise invalid_request(
            f"Invalid string: {param} must be at most {max_length} characters", param=param
        )
    return value


def as_dict(value: Any, param: str) -> dict[str, Any]:
    if value == "":
        return {}
    if not isinstance(value, dict):
        raise invalid_request(f"Invalid object: {param} must be a hash", param=param)
    return value


def as_list(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list):
        raise invalid_request(f"Invalid array: {param} must be an array", param=param)
    return value


def reject_unknown(params: dict[str, Any], allowed: set[str], prefix: str = "") -> None:
    """Stripe answers 400 for any parameter it doesn't know; so does the fake."""
    for key in params:
        if key not in allowed:
            name = f"{prefix}[{key}]" if prefix else key
            raise invalid_request(f"Received unknown parameter: {name}", param=name)


def require(params: dict[str, Any], key: str, prefix: str = "") -> Any:
    name = f"{prefix}[{key}]" if prefix else key
    if key not in params or params[key] == "":
        raise invalid_request(f"Missing required param: {name}.", param=name)
    return params[key]


def metadata(value: Any, param: str = "metadata") -> dict[str, str]:
    """Validate metadata like Stripe: ≤50 keys, keys ≤40 chars, values ≤500 chars, strings."""
    data = as_dict(value, param)
    if len(data) > 50:
        raise invalid_request("You can have at most 50 metadata keys.", param=param)
    clean: dict[str, str] = {}
    for key, item in data.items():
        name = f"{param}[{key}]"
        if len(key) > 40:
            raise invalid_request(f"Metadata keys can be at most 40 characters: {key}", param=name)
        if not isinstance(item, str):
            raise invalid_request(f"Invalid metadata value for {key}", param=name)
        if len(item) > 500:
            raise invalid_request(
                f"Metadata values can be at most 500 characters: {key}", param=name
            )
        if item != "":
            clean[key] = item
    return clean
