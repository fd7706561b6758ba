"""Team tokens: a token never makes a broader one, the console and `POST /auth/token` make team
tokens with chosen scopes, and `GET /me` says which team, role and scopes a request acts with."""

import pytest
from rest_framework.test import APIClient

from billing.onboarding import team_create
from starverse.accounts.models import ApiToken, AuditEvent
from tests.factories import PASSWORD, make_user
from tests.teams.test_teams import bearer, join, make_token_for

ALL = ["read", "instances", "billing", "admin"]


@pytest.fixture
def two_teams(db):
    """li owns the NLP lab and is a plain member of the Vision lab."""
    li, other = make_user(), make_user()
    nlp = team_create(user=li, name="NLP lab")
    vision = team_create(user=other, name="Vision lab")
    join(vision, other, li)
    return li, nlp, vision


def _tokens(user):
    return set(ApiToken.objects.filter(user=user).values_list("id", flat=True))


def _mint(client, **body):
    return client.post("/api/v1/tokens", {"name": "child", **body}, format="json")


def test_a_team_token_makes_tokens_of_its_own_team_only(two_teams):
    li, nlp, vision = two_teams
    api = bearer(li, team=nlp, scopes=["read", "admin"])
    before = _tokens(li)

    personal = _mint(api, team="", scopes=["read"])
    other_team = _mint(api, team=vision.pk, scopes=["read"])
    by_name = _mint(api, team="vision LAB", scopes=["read"])

    for refused in (personal, other_team, by_name):
        assert (refused.status_code, refused.json()["code"]) == (403, "wrong_team")
        assert nlp.pk in refused.json()["detail"]
    assert _tokens(li) == before
    same = _mint(api, team=nlp.pk, scopes=["read"])
    assert same.status_code == 201
    assert (same.json()["team"], same.json()["scopes"]) == (nlp.pk, ["read"])


def test_a_token_grants_no_scope_it_lacks(two_teams):
    li, nlp, _vision = two_teams
    api = bearer(li, team=nlp, scopes=["read", "admin"])
    before = _tokens(li)

    wider = _mint(api, scopes=["read", "instances", "billing"])

    assert (wider.status_code, wider.json()["code"]) == (403, "insufficient_scope")
    assert "instances, billing scope" in wider.json()["detail"]
    assert _tokens(li) == before
    # left out, the team and the scopes are the creating token's own
    inherited = _mint(api)
    assert inherited.status_code == 201
    assert (inherited.json()["team"], inherited.json()["scopes"]) == (nlp.pk, ["read", "admin"])
    narrower = _mint(api, scopes=["admin"])
    assert narrower.json()["scopes"] == ["admin"]


def test_a_personal_token_makes_team_tokens_for_the_persons_teams_within_its_scopes(two_teams):
    li, _nlp, vision = two_teams
    api = bearer(li, scopes=["read", "admin"])
    stranger_team = team_create(user=make_user(), name="Robotics")

    made = _mint(api, team="Vision lab", scopes=["read"])
    wider = _mint(api, team=vision.pk, scopes=["instances"])
    foreign = _mint(api, team=stranger_team.pk, scopes=["read"])

    assert made.status_code == 201
    assert (made.json()["team"], made.json()["scopes"]) == (vision.pk, ["read"])
    assert (wider.status_code, wider.json()["code"]) == (403, "insufficient_scope")
    assert foreign.status_code == 404
    assert not ApiToken.objects.filter(team=stranger_team).exists()
    assert list(ApiToken.objects.filter(user=li, team=vision).values_list("scopes", flat=True)) == [
        ["read"]
    ]


def test_the_person_in_a_session_is_not_limited_by_any_token(two_teams):
    li, nlp, _vision = two_teams
    make_token_for(li, team=nlp, scopes=["read"])
    session = APIClient()
    session.force_login(li)

    made = _mint(session, scopes=ALL)

    assert made.status_code == 201
    assert (made.json()["team"], made.json()["scopes"]) == (None, ALL)


def test_a_team_token_sees_and_revokes_only_its_teams_tokens(two_teams):
    li, nlp, vision = two_teams
    personal, _ = make_token_for(li)
    in_vision, _ = make_token_for(li, team=vision)
    api = bearer(li, team=nlp, scopes=["read", "admin"])

    listed = {row["id"] for row in api.get("/api/v1/tokens").json()["results"]}

    assert listed == set(ApiToken.objects.filter(team=nlp).values_list("id", flat=True))
    assert personal.pk not in listed and in_vision.pk not in listed
    assert api.delete(f"/api/v1/tokens/{personal.pk}").status_code == 404
    assert api.delete(f"/api/v1/tokens/{in_vision.pk}").status_code == 404
    assert ApiToken.objects.filter(pk__in=[personal.pk, in_vision.pk], revoked_at=None).count() == 2
    everything = bearer(li).get("/api/v1/tokens").json()["results"]
    assert {personal.pk, in_vision.pk} <= {row["id"] for row in everything}


def test_log_in_for_a_team_with_chosen_scopes(two_teams, api):
    li, _nlp, vision = two_teams

    answer = api.post(
        "/api/v1/auth/token",
        {"email": li.email, "password": PASSWORD, "team": "Vision lab", "scopes": ["read"]},
        format="json",
    )

    assert answer.status_code == 201
    assert (answer.json()["team"], answer.json()["scopes"]) == (vision.pk, ["read"])
    token = ApiToken.objects.get(pk=answer.json()["id"])
    assert (token.team_id, token.scopes) == (vision.pk, ["read"])
    assert AuditEvent.objects.filter(tenant=vision, action="token.created", actor=li).exists()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {answer.json()['token']}")
    me = api.get("/api/v1/me").json()
    assert me["team"] == {"id": vision.pk, "name": "Vision lab", "role": "member"}
    assert me["scopes"] == ["read"]


def test_log_in_for_a_team_one_is_not_in_is_a_404_and_makes_no_token(two_teams, api):
    li, _nlp, _vision = two_teams
    stranger_team = team_create(user=make_user(), name="Robotics")

    refused = api.post(
        "/api/v1/auth/token",
        {"email": li.email, "password": PASSWORD, "team": stranger_team.pk},
        format="json",
    )
    bad_scope = api.post(
        "/api/v1/auth/token",
        {"email": li.email, "password": PASSWORD, "scopes": ["root"]},
        format="json",
    )

    assert refused.status_code == 404
    assert bad_scope.status_code == 400
    assert not ApiToken.objects.filter(user=li).exists()


def test_two_teams_of_one_name_need_the_id(two_teams):
    li, _nlp, _vision = two_teams
    team_create(user=li, name="nlp LAB")

    refused = _mint(bearer(li), team="NLP lab")

    assert (refused.status_code, refused.json()["code"]) == (400, "ambiguous_team")


def test_me_says_which_team_role_and_scopes_a_request_acts_with(two_teams, client):
    li, nlp, _vision = two_teams

    personal = bearer(li, scopes=["read"]).get("/api/v1/me").json()
    team = bearer(li, team=nlp).get("/api/v1/me").json()
    client.force_login(li)
    session = client.get("/api/v1/me").json()
    client.post("/teams/switch/", {"team": nlp.pk})
    switched = client.get("/api/v1/me").json()

    assert (personal["team"], personal["scopes"]) == (None, ["read"])
    assert (team["team"], team["scopes"]) == (
        {"id": nlp.pk, "name": "NLP lab", "role": "owner"},
        ALL,
    )
    assert (session["team"], session["scopes"]) == (None, None)
    assert (switched["team"], switched["scopes"]) == (
        {"id": nlp.pk, "name": "NLP lab", "role": "owner"},
        None,
    )


# ---------------------------------------------------------------- the console's tokens page


def _console(client, user, team=None):
    client.force_login(user)
    if team is not None:
        client.post("/teams/switch/", {"team": team.pk})
    return client


def test_the_console_makes_a_token_for_the_team_it_is_switched_to(two_teams, client):
    li, _nlp, vision = two_teams
    console = _console(client, li, vision)

    page = console.get("/accounts/tokens/").content.decode()

    assert f'<option value="{vision.pk}" selected>Vision lab</option>' in page
    assert page.count('name="scopes"') == 4 and page.count(" checked>") >= 4
    done = console.post(
        "/accounts/tokens/", {"name": "ci", "team": vision.pk, "scopes": ["read", "instances"]}
    )
    assert done.status_code == 200
    token = ApiToken.objects.get(user=li, name="ci")
    assert (token.team_id, token.scopes) == (vision.pk, ["read", "instances"])
    assert AuditEvent.objects.filter(tenant=vision, action="token.created", actor=li).exists()
    listed = console.get("/accounts/tokens/").content.decode()
    assert '<td data-label="Acts for" data-token-team>Vision lab</td>' in listed
    scopes = '<td data-label="Scopes" data-token-scopes="read instances">read, instances</td>'
    assert scopes in listed


def test_the_console_makes_personal_tokens_and_refuses_strangers_teams(two_teams, client):
    li, _nlp, _vision = two_teams
    stranger_team = team_create(user=make_user(), name="Robotics")
    console = _console(client, li)

    page = console.get("/accounts/tokens/").content.decode()
    assert '<option value="personal" selected>Personal account</option>' in page
    console.post("/accounts/tokens/", {"name": "mine", "team": "personal", "scopes": ALL})
    every = '<td data-label="Scopes" data-token-scopes="read instances billing admin">all</td>'
    assert every in console.get("/accounts/tokens/").content.decode()
    foreign = console.post(
        "/accounts/tokens/", {"name": "theirs", "team": stranger_team.pk, "scopes": ALL}
    )
    none = console.post("/accounts/tokens/", {"name": "nothing", "team": "personal"})

    mine = ApiToken.objects.get(user=li)
    assert (mine.name, mine.team_id, mine.scopes) == ("mine", None, ALL)
    assert foreign.status_code == 200 and b"field-error" in foreign.content
    assert "Choose at least one scope." in none.content.decode()


def test_the_console_gives_a_billing_member_the_scopes_the_api_gives(two_teams, client):
    """The rules of token creation are the API's (one service): any member may hold any scope;
    what a token may do stays limited by the role (test_billing_role_reads_and_pays_but_orders_
    nothing)."""
    li, nlp, _vision = two_teams
    payer = make_user()
    join(nlp, li, payer, role="billing")
    console = _console(client, payer, nlp)

    console.post("/accounts/tokens/", {"name": "pay", "team": nlp.pk, "scopes": ["instances"]})
    api_made = _mint(bearer(payer), team=nlp.pk, scopes=["instances"])

    assert ApiToken.objects.get(user=payer, name="pay").scopes == ["instances"]
    assert api_made.status_code == 201


def test_a_team_token_cannot_act_on_the_persons_own_account(two_teams):
    """SSH keys (root on the person's own instances), their settings and second factor, their
    own money and the teams they open or join are the person's: a team's token is refused there
    (403 `wrong_team`) and nothing changes; a personal token may."""
    from billing.models import Wallet
    from starverse.accounts.models import SshKey, Tenant, UserSettings
    from tests.factories import SSH_KEYS, fund
    from tests.teams.test_teams import fund_team

    li, nlp, _vision = two_teams
    fund(li, 50_000)
    fund_team(nlp, 50_000)
    team_api, own_api = bearer(li, team=nlp), bearer(li)
    key = {"name": "desk", "public_key": SSH_KEYS["k_ed"]["public_key"]}
    before = (
        list(SshKey.objects.filter(user=li).values_list("pk", flat=True)),
        list(UserSettings.objects.filter(user=li).values()),
        dict(Wallet.objects.values_list("tenant_id", "cash_fen")),
        Tenant.objects.count(),
    )
    refused = [
        team_api.post("/api/v1/ssh-keys", key, format="json"),
        team_api.get("/api/v1/ssh-keys"),
        team_api.patch("/api/v1/account/settings", {"idle_minutes": 15}, format="json"),
        team_api.get("/api/v1/me/2fa"),
        team_api.post(
            f"/api/v1/teams/{nlp.pk}/transfers",
            {"amount_fen": 100, "direction": "to_team"},
            format="json",
        ),
        team_api.post(
            f"/api/v1/teams/{nlp.pk}/transfers",
            {"amount_fen": 100, "direction": "from_team"},
            format="json",
        ),
        team_api.post("/api/v1/teams", {"name": "Shadow lab"}, format="json"),
    ]

    for answer in refused:
        assert (answer.status_code, answer.json()["code"]) == (403, "wrong_team"), answer.json()
        assert "Use a personal token or the console." in answer.json()["detail"]
    after = (
        list(SshKey.objects.filter(user=li).values_list("pk", flat=True)),
        list(UserSettings.objects.filter(user=li).values()),
        dict(Wallet.objects.values_list("tenant_id", "cash_fen")),
        Tenant.objects.count(),
    )
    assert after == before
    assert team_api.get("/api/v1/teams").status_code == 200  # reading its own team is fine
    assert own_api.post("/api/v1/ssh-keys", key, format="json").status_code == 201
    moved = own_api.post(
        f"/api/v1/teams/{nlp.pk}/transfers",
        {"amount_fen": 100, "direction": "to_team"},
        format="json",
    )
    assert moved.status_code == 201
