"""The client's address behind NUM_PROXIES proxies (starverse.core.addresses), the one reading
of it that the audit log, sign-up records, throttles and lockouts, /metrics' address allowance
and the access log share: behind the chart's ingress (NUM_PROXIES=1) REMOTE_ADDR is the
ingress's, and the client is the entry the ingress appended to X-Forwarded-For."""

import datetime as dt
from types import SimpleNamespace

import pytest
from django.test import Client
from gunicorn.config import Config

from starverse.access_log import AccessLog
from starverse.accounts.models import AuditEvent, User
from starverse.core.addresses import client_ip_of
from tests.factories import PASSWORD, make_token, make_user

INGRESS = "10.244.3.7"  # the ingress controller's pod, in the pod range
CLIENT = "203.0.113.9"


@pytest.fixture
def behind_the_ingress(settings):
    settings.NUM_PROXIES = 1
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    return {"REMOTE_ADDR": INGRESS, "HTTP_X_FORWARDED_FOR": f"198.51.100.1, {CLIENT}"}


@pytest.mark.parametrize(
    ("proxies", "meta", "client"),
    [
        (0, {"REMOTE_ADDR": CLIENT, "HTTP_X_FORWARDED_FOR": "198.51.100.1"}, CLIENT),
        (1, {"REMOTE_ADDR": INGRESS, "HTTP_X_FORWARDED_FOR": f"198.51.100.1, {CLIENT}"}, CLIENT),
        (1, {"REMOTE_ADDR": INGRESS, "HTTP_X_FORWARDED_FOR": f" {CLIENT} "}, CLIENT),
        (
            2,
            {"REMOTE_ADDR": INGRESS, "HTTP_X_FORWARDED_FOR": f"1.1.1.1, {CLIENT}, 10.0.0.2"},
            CLIENT,
        ),
        (1, {"REMOTE_ADDR": CLIENT}, CLIENT),  # a scrape straight to the pod: no header
        (1, {"REMOTE_ADDR": INGRESS, "HTTP_X_FORWARDED_FOR": "not-an-address"}, INGRESS),
        (1, {"REMOTE_ADDR": INGRESS, "HTTP_X_FORWARDED_FOR": "2001:DB8::1"}, "2001:db8::1"),
        (0, {"REMOTE_ADDR": ""}, None),
    ],
)
def test_the_client_is_the_entry_our_outermost_proxy_appended(settings, proxies, meta, client):
    settings.NUM_PROXIES = proxies
    assert client_ip_of(meta) == client


def test_the_audit_log_records_the_client_not_the_ingress(db, behind_the_ingress):
    user = make_user()
    _token, plaintext = make_token(user)

    made = Client().post(
        "/api/v1/tokens",
        {"name": "ci"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {plaintext}",
        **behind_the_ingress,
    )

    assert made.status_code == 201
    event = AuditEvent.objects.get(action="token.created", object_id=made.json()["id"])
    assert event.ip == CLIENT


def test_a_forged_header_past_the_proxies_is_no_address_and_signs_up_from_remote_addr(
    db, behind_the_ingress
):
    answer = Client().post(
        "/api/v1/auth/signup",
        {"email": "new@lab.example.edu.cn", "password": PASSWORD},
        content_type="application/json",
        REMOTE_ADDR="10.244.9.9",
        HTTP_X_FORWARDED_FOR="<script>",
    )

    assert answer.status_code == 201
    assert User.objects.get(email="new@lab.example.edu.cn").signup_ip == "10.244.9.9"


def test_metrics_allowed_for_the_pod_range_refuse_the_internet_through_the_ingress(
    db, settings, behind_the_ingress
):
    settings.DEBUG = False
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_CIDRS = ["10.244.0.0/16"]

    through_the_ingress = Client().get("/metrics", **behind_the_ingress)
    prometheus = Client().get("/metrics", REMOTE_ADDR="10.244.5.5", HTTP_HOST="10.244.1.2:8000")

    assert through_the_ingress.status_code == 403
    assert prometheus.status_code == 200


def test_lockouts_count_each_client_behind_the_ingress_apart(db, settings, behind_the_ingress):
    settings.LOGIN_FAILURES_PER_ADDRESS = 2
    one, other = Client(**behind_the_ingress), Client(REMOTE_ADDR=INGRESS)
    other.defaults["HTTP_X_FORWARDED_FOR"] = "198.51.100.77"

    def attempt(client):
        return client.post("/accounts/login/", {"username": "x@lab.cn", "password": "wrong!"})

    assert [attempt(one).status_code for _ in range(3)] == [200, 200, 429]
    assert attempt(other).status_code == 200


def test_the_access_log_names_the_client(settings):
    settings.NUM_PROXIES = 1
    environ = {
        "REQUEST_METHOD": "GET",
        "RAW_URI": "/api/v1/me",
        "PATH_INFO": "/api/v1/me",
        "QUERY_STRING": "",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": INGRESS,
        "HTTP_X_FORWARDED_FOR": f"198.51.100.1, {CLIENT}",
    }
    response = SimpleNamespace(status="200 OK", sent=0, headers=[])
    request = SimpleNamespace(headers=[])

    atoms = AccessLog(Config()).atoms(response, request, environ, dt.timedelta(milliseconds=3))

    assert atoms["h"] == CLIENT
