"""The OpenAPI schema as the code generates it, the API's routes as the URL configuration has
them, and JSON Schema validators for the schema's bodies."""

import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator
from jsonschema import Draft202012Validator

API_PREFIX = "api/v1/"
IGNORED_METHODS = ("head", "options", "trace")


@cache
def code_schema() -> dict[str, Any]:
    """What `manage.py spectacular` writes, as plain JSON."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(json.dumps(schema, cls=DjangoJSONEncoder))


@dataclass(frozen=True)
class Route:
    path: str  # the OpenAPI path template, e.g. /api/v1/instances/{id}/stop
    method: str  # lower case

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.path}"


def _template(route: str) -> str:
    path = route.replace("^", "").replace("$", "")
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", path)  # router regexes
    path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", path)  # path() converters
    return "/" + path.replace("{pk}", "{id}")


def _methods(callback: Any) -> list[str]:
    actions = getattr(callback, "actions", None)
    if actions:  # a ViewSet route
        return [method for method in actions if method not in IGNORED_METHODS]
    view_class = callback.cls
    return [
        method
        for method in view_class.http_method_names
        if method not in IGNORED_METHODS and hasattr(view_class, method)
    ]


def api_routes() -> list[Route]:
    """Every (path, method) routed under /api/v1/, read from the URL configuration."""
    routes: list[Route] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                route = prefix + str(pattern.pattern)
                if route.startswith(API_PREFIX):
                    path = _template(route)
                    routes.extend(Route(path, method) for method in _methods(pattern.callback))

    walk(get_resolver().url_patterns, "")
    return sorted(set(routes), key=lambda r: (r.path, r.method))


def _json_schema(node: Any, *, closed: bool) -> Any:
    """OpenAPI 3.0 schema → JSON Schema 2020-12: `nullable` becomes a null alternative, refs
    point into $defs, and (for answers) an object allows no keys it does not declare."""
    if isinstance(node, list):
        return [_json_schema(item, closed=closed) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _json_schema(value, closed=closed) for key, value in node.items()}
    if isinstance(out.get("$ref"), str):
        out["$ref"] = out["$ref"].replace("#/components/schemas/", "#/$defs/")
    if closed and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if out.pop("nullable", False):
        return {"anyOf": [out, {"type": "null"}]}
    return out


@cache
def _defs(closed: bool) -> dict[str, Any]:
    """The schema's components as $defs, converted once a session: every validator shares them
    (validating reads a schema, never changes it)."""
    components = code_schema()["components"]["schemas"]
    return {name: _json_schema(value, closed=closed) for name, value in components.items()}


def validator(schema: dict[str, Any], *, closed: bool) -> Draft202012Validator:
    return Draft202012Validator({**_json_schema(schema, closed=closed), "$defs": _defs(closed)})


def problems(schema: dict[str, Any], body: Any, *, closed: bool) -> list[str]:
    found = validator(schema, closed=closed).iter_errors(body)
    return [f"{'/'.join(map(str, e.absolute_path)) or '(body)'}: {e.message[:300]}" for e in found]
