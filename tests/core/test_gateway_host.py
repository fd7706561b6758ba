"""The console answers a Host of the gateway's domain (an instance's address) only at
/gateway/auth, the proxy's check: ALLOWED_HOSTS names `.GATEWAY_DOMAIN` for that check alone.
Anywhere else such a request is a 400 before any view runs, so no page of the console (its
log-in, a password reset whose link once named the Host) is served at a tenant's address."""

import pytest
from django.core import mail
from django.test import Client

from starverse.accounts.models import User
from tests.factories import make_user

GATEWAY_HOST = "ins-abcdefghijklmnopqrst-8888.localhost:8002"  # under GATEWAY_DOMAIN in tests
REFUSED = (
    "This address serves an instance, not the console: open the console at http://127.0.0.1:8000."
)


@pytest.mark.parametrize(
    "path",
    [
        "/accounts/login/",
        "/accounts/password-reset/",
        "/console/",
        "/",
        "/admin/login/",
        "/metrics",
        "/healthz",
        "/gateway/login",
        "/gateway/authx",
    ],
)
def test_a_gateway_host_is_refused_on_the_consoles_pages(db, path):
    answer = Client().get(path, HTTP_HOST=GATEWAY_HOST)

    assert answer.status_code == 400
    assert answer.content.decode() == REFUSED


def test_a_gateway_host_on_the_api_gets_the_apis_error(db):
    answer = Client().get("/api/v1/me", HTTP_HOST="ep-abcdefghijklmnopqrst.localhost:8002")

    assert answer.status_code == 400
    assert answer.json() == {"detail": REFUSED, "code": "wrong_host"}


def test_the_password_reset_at_a_gateway_host_sends_nothing(db):
    user = make_user()

    answer = Client().post(
        "/accounts/password-reset/", {"email": user.email}, HTTP_HOST=GATEWAY_HOST
    )

    assert answer.status_code == 400
    assert mail.outbox == []


def test_the_proxys_check_is_still_answered_at_the_gateway_host(db):
    for path in ("/gateway/auth", "/gateway/auth/lab/tree"):
        answer = Client().get(path, HTTP_HOST=GATEWAY_HOST)
        assert answer.status_code == 302  # no cookie: off to the console's log-in
        assert answer["Location"].startswith("http://127.0.0.1:8000/gateway/login?next=")


def test_the_console_and_other_ports_of_localhost_are_not_the_gateway(db):
    for host in ("127.0.0.1:8000", "localhost:8000", "testserver"):
        assert Client().get("/accounts/login/", HTTP_HOST=host).status_code == 200
    assert User.objects.count() == 0
