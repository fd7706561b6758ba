"""The gateway's authorization check for endpoint hosts: a live key of that very endpoint
passes, anything else is a 401 in OpenAI's error shape; other hosts still get the instances'
check."""

import pytest
from django.core.cache import cache
from django.test import Client

from endpoints.manifests import endpoint_host
from endpoints.services import endpoint_delete, key_create, key_revoke
from tests.factories import make_endpoint, make_user


@pytest.fixture
def endpoint(db):
    return make_endpoint(make_user())


def _check(host, key=None):
    headers = {"HTTP_X_FORWARDED_HOST": host, "HTTP_X_FORWARDED_URI": "/v1/models"}
    if key is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    return Client().get("/gateway/auth", **headers)


def test_a_live_key_of_the_endpoint_passes(endpoint):
    _row, secret = key_create(endpoint=endpoint, name="k", user=endpoint.created_by)
    answer = _check(endpoint_host(endpoint.id), secret)
    assert answer.status_code == 200
    assert answer["X-Starverse-Endpoint"] == endpoint.id.lower()
    assert answer["Cache-Control"] == "no-store"


@pytest.mark.parametrize("key", [None, "", "sk-sv-wrong"])
def test_no_key_or_a_wrong_one_is_a_401_in_openais_shape(endpoint, key):
    answer = _check(endpoint_host(endpoint.id), key)
    assert answer.status_code == 401
    assert answer["Content-Type"] == "application/json"
    assert answer["WWW-Authenticate"] == 'Bearer realm="endpoint"'
    error = answer.json()["error"]
    assert error["code"] == "invalid_api_key"
    assert error["type"] == "invalid_request_error"


def test_a_key_of_another_endpoint_does_not_open_this_one(endpoint):
    other = make_endpoint(make_user(), name="other")
    _row, secret = key_create(endpoint=other, name="k", user=other.created_by)
    assert _check(endpoint_host(other.id), secret).status_code == 200
    assert _check(endpoint_host(endpoint.id), secret).status_code == 401


def test_a_revoked_key_stops_passing_once_the_check_cache_lapses(endpoint):
    row, secret = key_create(endpoint=endpoint, name="k", user=endpoint.created_by)
    assert _check(endpoint_host(endpoint.id), secret).status_code == 200
    key_revoke(endpoint=endpoint, key_id=row.id)
    cache.clear()  # what KEY_CACHE_S (2 s) later looks like
    assert _check(endpoint_host(endpoint.id), secret).status_code == 401


def test_a_deleted_endpoints_keys_stop_passing(endpoint):
    _row, secret = key_create(endpoint=endpoint, name="k", user=endpoint.created_by)
    endpoint_delete(endpoint=endpoint)
    assert _check(endpoint_host(endpoint.id), secret).status_code == 401


def test_instance_hosts_still_get_the_instances_check(db, settings):
    answer = _check(f"ins-{'a' * 20}-8888.{settings.GATEWAY_DOMAIN}")
    assert answer.status_code == 302
    assert "/gateway/login" in answer["Location"]
