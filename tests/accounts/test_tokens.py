from django.db import connection

from starverse.accounts.models import ApiToken
from starverse.accounts.tokens import TOKEN_LENGTH, token_generate, token_is_well_formed
from tests.factories import PASSWORD, make_token


def test_generated_tokens_are_well_formed_and_a_typo_breaks_the_checksum():
    token = token_generate()

    assert len(token) == TOKEN_LENGTH
    assert token.startswith("sv_")
    assert token_is_well_formed(token)
    for position in range(3, len(token)):
        replacement = "A" if token[position] != "A" else "B"
        assert not token_is_well_formed(token[:position] + replacement + token[position + 1 :])
    assert not token_is_well_formed(token[:-1])


def test_token_plaintext_is_never_stored(user):
    _token, plaintext = make_token(user)

    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM accounts_apitoken")
        stored = " ".join(str(value) for row in cursor.fetchall() for value in row)
    assert plaintext not in stored
    assert plaintext[3:] not in stored
    assert ApiToken.objects.get().prefix == plaintext[:9]


def test_create_list_use_and_revoke_tokens(api, user, client_for):
    client = client_for(user)

    created = client.post("/api/v1/tokens", {"name": "ci runner"}, format="json")
    assert created.status_code == 201
    new = created.json()
    listed = client.get("/api/v1/tokens").json()
    assert new["name"] == "ci runner"
    assert {row["id"] for row in listed["results"]} >= {new["id"]}
    assert all("token" not in row for row in listed["results"])

    api.credentials(HTTP_AUTHORIZATION=f"Bearer {new['token']}")
    assert api.get("/api/v1/me").status_code == 200
    assert client.delete(f"/api/v1/tokens/{new['id']}").status_code == 204
    refused = api.get("/api/v1/me")
    assert refused.status_code == 401
    assert refused.json() == {
        "detail": "Invalid or revoked token.",
        "code": "authentication_failed",
    }
    assert new["id"] not in {row["id"] for row in client.get("/api/v1/tokens").json()["results"]}


def test_mistyped_token_is_refused_without_a_database_query(api, user, django_assert_num_queries):
    _token, plaintext = make_token(user)
    typo = plaintext[:10] + ("x" if plaintext[10] != "x" else "y") + plaintext[11:]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {typo}")

    with django_assert_num_queries(0):
        response = api.get("/api/v1/me")

    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_deactivated_user_token_is_refused(api, user, client_for):
    client = client_for(user)
    user.is_active = False
    user.save(update_fields=["is_active"])

    assert client.get("/api/v1/me").status_code == 401


def test_token_from_credentials(api, user):
    response = api.post(
        "/api/v1/auth/token",
        {"email": user.email.upper(), "password": PASSWORD, "name": "laptop"},
        format="json",
    )
    wrong = api.post(
        "/api/v1/auth/token", {"email": user.email, "password": "nope-nope-nope"}, format="json"
    )

    assert response.status_code == 201
    assert response.json()["name"] == "laptop"
    assert response.json()["token"].startswith("sv_")
    assert wrong.status_code == 401
    assert ApiToken.objects.filter(user=user).count() == 1


def test_console_token_page_shows_the_token_once(client, user):
    client.force_login(user)

    created = client.post(
        "/accounts/tokens/",
        {"name": "notebook", "team": "personal", "scopes": ["read", "instances"]},
    )
    again = client.get("/accounts/tokens/")

    token = ApiToken.objects.get(user=user, name="notebook")
    assert (token.team_id, token.scopes) == (None, ["read", "instances"])
    page = created.content.decode()
    plaintext = next(
        word
        for word in page.replace('"', " ").replace("<", " ").replace(">", " ").split()
        if word.startswith("sv_") and len(word) == TOKEN_LENGTH
    )
    assert token_is_well_formed(plaintext)
    assert plaintext not in again.content.decode()
    client.post(f"/accounts/tokens/{token.id}/revoke/")
    token.refresh_from_db()
    assert token.revoked_at is not None
