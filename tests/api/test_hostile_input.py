"""Generated from the URL configuration: every operation under /api/v1/ is sent hostile input —
JSON nested 10,000 deep, NUL bytes, lone surrogates, numbers no column holds, absurd pages,
wrong types, megabyte strings, a body over the limit — as its user, as staff and without
credentials. No answer may be a 5xx, and every JSON answer to bad input is the usual
`{"detail", "code"}`. A new route is walked here without any change to this file."""

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from fleet.services import node_token_issue
from tests.api.openapi import Route, api_routes, code_schema
from tests.api.test_schema_walk import _node
from tests.factories import (
    fund,
    make_disk,
    make_instance,
    make_operator,
    make_ssh_key,
    make_token,
    make_user,
)

ROUTES = api_routes()
UNSAFE = ("post", "put", "patch", "delete")
MEGABYTE = "x" * 1_000_000

# JSON fragments, written out so that what no encoder would produce can be sent too.
HOSTILE_VALUES = {
    "nul": '"\\u0000"',
    "nul inside": '"a\\u0000b"',
    "raw nul byte": '"a\x00b"',
    "lone surrogate": '"\\ud800"',
    "low surrogate": '"x\\udfff"',
    "1e400": "1e400",
    "-1e400": "-1e400",
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-1": "-1",
    "0": "0",
    "2**70": str(2**70),
    "-2**70": str(-(2**70)),
    "2**63": str(2**63),
    "float": "3.5",
    "huge digits": "9" * 5000,
    "true": "true",
    "null": "null",
    "empty string": '""',
    "numeric string": f'"{2**70}"',
    "list": "[1, 2]",
    "object": '{"a": 1}',
    "list of nul": '["\\u0000"]',
    "object of nul": '{"\\u0000": "\\u0000"}',
    "megabyte string": json.dumps(MEGABYTE),
}
HOSTILE_BODIES = {
    "deep lists": "[" * 10_000 + "]" * 10_000,
    "deep objects": '{"a":' * 10_000 + "1" + "}" * 10_000,
    "33 deep": "[" * 33 + "]" * 33,
    "list": "[]",
    "list of objects": '[{"name": "x"}]',
    "string": '"x"',
    "number": "1",
    "null": "null",
    "NUL key": '{"\\u0000": 1}',
    "surrogate key": '{"\\ud800": 1}',
    "not JSON": "{not json",
    "invalid UTF-8": '{"name": "\udcff\udcfe"}',  # sent as the bytes FF FE
    "empty": "",
}
HOSTILE_QUERY_VALUES = {
    "nul": "\x00",
    "-1": "-1",
    "0": "0",
    "huge": "99999999999999999999",
    "2**70": str(2**70),
    "1e400": "1e400",
    "digits": "9" * 5000,
    "long": "x" * 100_000,
    "surrogate bytes": "\udcff",
}
QUERY_NAMES = ("page", "page_size", "q", "status", "keep_disk", "restart", "kind")
HOSTILE_PATH_VALUES = ("%00", "%ED%A0%80", "x" * 10_000, "-1", "99999999999999999999", "%FF")
HOSTILE_HEADERS = {
    "HTTP_IDEMPOTENCY_KEY": ["\x00", "x" * 100_000],
    "HTTP_ACCEPT_LANGUAGE": ["\x00", "zz-" + "x" * 10_000],
    "CONTENT_TYPE": ["application/json; charset=utf-16", "application/json; charset=bogus"],
}


def _operation(route: Route) -> dict[str, Any]:
    return code_schema()["paths"].get(route.path, {}).get(route.method) or {}


def _body_fields(route: Route) -> list[str]:
    body = _operation(route).get("requestBody", {}).get("content", {}).get("application/json")
    if not body:
        return ["name"]
    schema = body["schema"]
    if "$ref" in schema:
        schema = code_schema()["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return sorted(schema.get("properties", {})) or ["name"]


def _query_names(route: Route) -> set[str]:
    declared = {p["name"] for p in _operation(route).get("parameters", []) if p["in"] == "query"}
    return declared | set(QUERY_NAMES)


class Walker:
    def __init__(self, route: Route, who: str, request: Any) -> None:
        self.route = route
        user = make_operator() if who == "staff" else make_user()
        self.client = APIClient(raise_request_exception=True)
        if who != "anon":
            self.client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(user)[1]}")
        self.params = self._owned(user, route, request)
        self.sent = 0

    @staticmethod
    def _owned(user: Any, route: Route, request: Any) -> dict[str, str]:
        """Ids of the user's own objects, so that a body reaches the route's serializer rather
        than stopping at a 404."""
        names = set(re.findall(r"{(\w+)}", route.path))
        params: dict[str, str] = {}
        if not names:
            return params
        fund(user, 100_000, key="hostile")
        kinds = route.path.split("/")[3]
        if "disk" in names or kinds == "disks":
            params["disk"] = make_disk(user).id
        if kinds == "instances":
            params["id"] = make_instance(user).id
        elif kinds == "disks":
            params["id"] = params["disk"]
        elif kinds == "tokens":
            params["id"] = make_token(user)[0].id
        elif kinds == "ssh-keys":
            params["id"] = make_ssh_key(user).id
        elif kinds == "billing" and "ledger" in route.path:
            params["id"] = user.tenant.wallet.transactions.first().id
        if "name" in names:
            node = _node()
            params["name"] = node.name
            params["node_token"] = node_token_issue(node=node)
        return params

    def path(self, **override: str) -> str:
        values = {**self.params, **override}
        return re.sub(r"{(\w+)}", lambda m: values.get(m[1], "unknown"), self.route.path)

    def send(self, what: str, *, path: str | None = None, body: str = "", **extra: Any) -> Any:
        headers: dict[str, Any] = {}
        if "node_token" in self.params and "HTTP_AUTHORIZATION" not in extra:
            headers["HTTP_AUTHORIZATION"] = f"Bearer {self.params['node_token']}"
        content_type = extra.pop("CONTENT_TYPE", "application/json")
        response = self.client.generic(
            self.route.method.upper(),
            path or self.path(),
            # bytes, so that invalid UTF-8 can be sent; the stubs say str, Django takes both
            body.encode("utf-8", "surrogateescape"),  # type: ignore[arg-type]
            content_type=content_type,
            **headers,
            **extra,
        )
        self.sent += 1
        where = f"{self.route} [{what}]"
        assert response.status_code < 500, (where, response.status_code, response.content[:300])
        if response.status_code >= 400 and response.get("Content-Type") == "application/json":
            answer = response.json()
            assert isinstance(answer.get("detail"), str), (where, answer)
            assert isinstance(answer.get("code"), str), (where, answer)
        return response


@pytest.fixture
def unthrottled(monkeypatch: Any) -> Iterator[None]:
    """Rate limits off, so that each input reaches the code that would choke on it."""
    monkeypatch.setattr(SimpleRateThrottle, "allow_request", lambda self, request, view: True)
    yield


@pytest.mark.parametrize("who", ["user", "staff", "anon"])
@pytest.mark.parametrize("route", ROUTES, ids=str)
def test_hostile_input_never_answers_5xx(route, who, request, db, unthrottled):
    walker = Walker(route, who, request)

    for name in sorted(_query_names(route)):
        for what, value in HOSTILE_QUERY_VALUES.items():
            query = f"{quote(name)}={quote(value, safe='', errors='surrogateescape')}"
            walker.send(f"?{name}= {what}", path=f"{walker.path()}?{query}")
    for param in re.findall(r"{(\w+)}", route.path):
        for value in HOSTILE_PATH_VALUES:
            walker.send(f"{{{param}}}={value[:20]}", path=walker.path(**{param: value}))
    for header, values in HOSTILE_HEADERS.items():
        for value in values:
            walker.send(f"{header}={value[:20]!r}", body="{}", **{header: value})
    walker.send("Authorization with NUL", HTTP_AUTHORIZATION="Bearer sv_\x00")
    walker.send("long Authorization", HTTP_AUTHORIZATION="Bearer sv_" + "x" * 100_000)

    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    oversized = walker.send("oversized body", body="x" * (limit + 1))
    assert (oversized.status_code, oversized.json()["code"]) == (413, "too_large")
    field = _body_fields(route)[0]
    wrong_typed = json.dumps({field: ["x" * 1000] * (limit // 1000)})
    assert walker.send("oversized wrong-typed body", body=wrong_typed).status_code == 413

    if route.method not in UNSAFE:
        return
    for what, body in HOSTILE_BODIES.items():
        walker.send(f"body {what}", body=body)
    for field in _body_fields(route):
        for what, fragment in HOSTILE_VALUES.items():
            walker.send(f"{field}: {what}", body=f"{{{json.dumps(field)}: {fragment}}}")
    assert walker.sent > 100
