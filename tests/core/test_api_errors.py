import pytest
from django.utils import translation
from rest_framework.test import APIClient

from instances.api import views as instances_views
from starverse.accounts.models import ApiToken, SshKey, User
from starverse.core.api import errors
from tests.factories import PASSWORD


@pytest.mark.parametrize(
    ("body", "content_type", "detail"),
    [
        ('{"email": "a@b.cn", "password": ', "application/json", "JSON parse error"),
        ('["a@b.cn"]', "application/json", "Invalid data. Expected a dictionary"),
        ('{"email": 12345, "password": "x"}', "application/json", "email: Must be a string."),
        ('{"email": "a@b.cn"}', "application/json", "password: This field is required."),
        (
            '{"email": "' + "a" * 300 + '@b.cn", "password": "x"}',
            "application/json",
            "email: Ensure this field has no more than 254 characters.",
        ),
        (
            '{"email": "a@b.cn", "password": "correct horse battery", "admin": true}',
            "application/json",
            "admin: Unknown field.",
        ),
        (
            '{"email": "not-an-address", "password": "correct horse battery"}',
            "application/json",
            "Enter a valid e-mail address.",
        ),
        ('{"email": "a@b.cn", "password": "12345678901"}', "application/json", "entirely numeric"),
        ("email=a@b.cn", "application/x-www-form-urlencoded", "Unsupported media type"),
    ],
)
def test_bad_signup_input_is_a_clear_error_and_writes_nothing(api, db, body, content_type, detail):
    response = api.generic("POST", "/api/v1/auth/signup", body, content_type=content_type)

    assert response.status_code in (400, 415)
    payload = response.json()
    assert detail in payload["detail"]
    assert set(payload) >= {"detail", "code"}
    assert User.objects.count() == 0


def test_wrong_types_and_sizes_on_authenticated_endpoints_write_nothing(user, client_for):
    client = client_for(user)
    before = ApiToken.objects.count()

    responses = [
        client.post("/api/v1/tokens", {"name": ["list"]}, format="json"),
        client.post("/api/v1/tokens", {"name": "n" * 101}, format="json"),
        client.post("/api/v1/tokens", {}, format="json"),
        client.post("/api/v1/ssh-keys", {"public_key": 42}, format="json"),
        client.post("/api/v1/ssh-keys", {"public_key": "x" * 20000}, format="json"),
    ]

    assert [r.status_code for r in responses] == [400] * 5
    assert responses[0].json()["errors"] == {"name": ["Must be a string."]}
    assert ApiToken.objects.count() == before
    assert SshKey.objects.count() == 0


def test_unauthenticated_and_unknown_paths_have_detail_and_code(api, db):
    me = api.get("/api/v1/me")
    missing = api.get("/api/v1/tokens/tok_doesnotexist", HTTP_AUTHORIZATION="Bearer sv_short")

    assert me.status_code == 401
    assert me.json() == {
        "detail": "Authentication credentials were not provided.",
        "code": "not_authenticated",
    }
    assert missing.status_code == 401


def test_session_auth_requires_csrf(user):
    from rest_framework.test import APIClient

    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)

    assert client.get("/api/v1/me").status_code == 200
    refused = client.post("/api/v1/tokens", {"name": "x"}, format="json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    assert ApiToken.objects.count() == 0


def test_lists_are_paginated(user, client_for):
    client = client_for(user)
    for index in range(3):
        client.post("/api/v1/tokens", {"name": f"t{index}"}, format="json")

    page = client.get("/api/v1/tokens?page_size=2").json()

    assert set(page) == {"count", "next", "previous", "results"}
    assert page["count"] == 4  # the three above plus the client's own token
    assert len(page["results"]) == 2
    assert "page=2" in page["next"]


def test_openapi_schema_lists_the_contract(api, db):
    response = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    paths = set(response.json()["paths"])
    assert paths >= {
        "/api/v1/auth/signup",
        "/api/v1/auth/token",
        "/api/v1/me",
        "/api/v1/tokens",
        "/api/v1/tokens/{id}",
        "/api/v1/ssh-keys",
        "/api/v1/ssh-keys/{id}",
        "/api/v1/billing/balance",
        "/api/v1/billing/ledger",
    }
    assert api.get("/api/docs/").status_code == 200


def test_signup_then_token_flow_uses_exact_contract_fields(
    api, db, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        body = api.post(
            "/api/v1/auth/signup", {"email": "c@lab.cn", "password": PASSWORD}, format="json"
        ).json()
    link = next(line for line in mailoutbox[0].body.splitlines() if "/verify-email/" in line)
    verified = api.post(
        "/api/v1/auth/verify-email", {"token": link.rstrip("/").rsplit("/", 1)[1]}, format="json"
    )
    assert verified.status_code == 200, verified.content
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {body['token']}")

    balance = api.get("/api/v1/billing/balance").json()
    ledger = api.get("/api/v1/billing/ledger").json()

    assert balance == {
        "cash_fen": 0,
        "promo_fen": 1000,
        "pending_fen": 0,
        "arrears_fen": 0,
        "total_fen": 1000,
        "on_hold": False,
        "currency": "CNY",
    }
    assert ledger["count"] == 1
    row = ledger["results"][0]
    assert {k: row[k] for k in ("kind", "amount_fen", "description", "instance")} == {
        "kind": "trial",
        "amount_fen": 1000,
        "description": "Trial credit",
        "instance": None,
    }
    assert row["id"].startswith("txn_")


NO_ROUTE = {
    "detail": "Not found: no API route has this address (the routes are listed at /api/docs/).",
    "code": "not_found",
}


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/disks/%C2%84",  # an id of no id's form
        "/api/v1/instances/%C3%A9t%C3%A9/stop",
        "/api/v1/disks/a%2Fb",
        "/api/v1/no-such-route",
        "/api/v1/me/",
        "/api/v2/me",
        "/api/",
    ],
)
def test_an_address_under_the_api_of_no_route_is_a_json_404(db, user, path):
    session = APIClient(enforce_csrf_checks=True)  # a browser's POST without its CSRF token
    session.force_login(user)

    for client in (APIClient(), session):
        for method in ("get", "post", "delete"):
            answer = getattr(client, method)(path)
            assert (answer.status_code, answer["Content-Type"]) == (404, "application/json")
            assert answer.json() == NO_ROUTE


def test_with_debug_on_the_api_404_is_json_too(api, db, settings):
    settings.DEBUG = True

    answer = api.get("/api/v1/disks/%C2%84")

    assert (answer.status_code, answer.json()) == (404, NO_ROUTE)


def test_the_schema_and_its_page_without_their_slash_are_redirected_to_it(api, db):
    answers = [api.get("/api/docs"), api.get("/api/schema")]

    assert [(a.status_code, a["Location"]) for a in answers] == [
        (301, "/api/docs/"),
        (301, "/api/schema/"),
    ]


def test_outside_the_api_a_404_is_still_the_page(client, db):
    answer = client.get("/console/no-such-page/")

    assert answer.status_code == 404
    assert answer["Content-Type"].startswith("text/html")


def test_an_error_no_view_handled_is_a_json_500_naming_the_request_id(db, monkeypatch):
    def broken() -> list:
        raise RuntimeError("a bug")

    monkeypatch.setattr(instances_views, "regions_overview", broken)
    api = APIClient(raise_request_exception=False)

    answer = api.get("/api/v1/regions", HTTP_X_REQUEST_ID="req-5bd1")

    assert (answer.status_code, answer["Content-Type"]) == (500, "application/json")
    assert answer.json() == {
        "detail": "Server error: the request failed on our side. If it happens again, give "
        "support the request id req-5bd1.",
        "code": "server_error",
    }
    assert answer["X-Request-ID"] == "req-5bd1"


def test_a_host_that_is_not_allowed_is_a_json_400_under_the_api(api, db):
    answer = api.get("/api/v1/offerings", HTTP_HOST="evil.example")

    assert (answer.status_code, answer.json()) == (
        400,
        {"detail": "Malformed request.", "code": "invalid"},
    )


def test_a_format_of_no_media_type_of_the_route_is_a_406(api, db, user, client_for):
    answers = [
        api.get("/api/v1/offerings?format=xml"),
        client_for(user).get("/api/v1/billing/usage?format=pdf"),
    ]

    assert [(a.status_code, a.json()["code"]) for a in answers] == [(406, "not_acceptable")] * 2


@pytest.mark.parametrize(("lang", "title"), [("en", "Server error"), ("zh-hans", "服务器错误")])
def test_an_error_outside_the_api_is_the_consoles_500_page(rf, lang, title):
    with translation.override(lang):
        answer = errors.server_error(rf.get("/console/"))

    html = answer.content.decode()
    assert answer.status_code == 500
    assert f"<title>{title} · Starverse</title>" in html
    assert f'<h1 class="auth-title">{title}</h1>' in html
