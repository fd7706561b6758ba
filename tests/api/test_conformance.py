"""The whole API against Schemathesis, a standard OpenAPI conformance tool, over the schema the
code generates: for every operation it derives requests from the schema — its coverage phase the
boundary values and the requests that break the schema (missing fields, wrong types, values out
of range, odd path parameters), its fuzzing phase a few random ones — and sends them to the
application in process as a signed-in user. Each answer must be no 5xx, carry a status code the
operation declares and the declared media type, and have a body the declared schema validates.
Generation is derandomized and bounded, so a run is the same every time and takes well under a
minute; tests/api/test_schema_walk.py provokes every declared answer on purpose."""

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from rest_framework.throttling import SimpleRateThrottle
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.openapi import code_schema
from tests.factories import make_token, make_user

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
CONFIG = SchemathesisConfig.from_dict(
    {
        "generation": {"max-examples": 4, "database": "none"},
        # one request at a time against one database: no stateful sequences; the methods a
        # path does not have are Django's 405s, not an operation's answers
        "phases": {"stateful": {"enabled": False}, "coverage": {"unexpected-methods": []}},
    }
)
DJANGO = WSGIHandler()


def application(environ: dict[str, Any], start_response: Any) -> Any:
    """The project's WSGI application, given the client address every server sets (the WSGI
    test client of Schemathesis leaves it out)."""
    environ.setdefault("REMOTE_ADDR", "127.0.0.1")
    return DJANGO(environ, start_response)


schema = schemathesis.openapi.from_dict(code_schema(), config=CONFIG)
schema.app = application


@pytest.fixture
def bearer(db: Any, payments: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A user's token header, rate limits off (so that every request reaches its view), top-ups
    on the Stripe stand-in, and the test's database connection kept across requests (a WSGI
    request closes it at its end, as Django's test client prevents too)."""
    monkeypatch.setattr(SimpleRateThrottle, "allow_request", lambda self, request, view: True)
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield {"Authorization": f"Bearer {make_token(make_user())[1]}"}
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(
    deadline=None,
    derandomize=True,
    database=None,
    # the fixture's user and token serve every generated request of the test, on purpose
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_generated_request_gets_a_declared_answer(case, bearer):
    case.call_and_validate(headers=bearer, checks=CHECKS)
