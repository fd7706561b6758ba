import csv
import io
from datetime import timedelta

import pytest
from rest_framework.test import APIClient

from billing.choices import TransactionKind
from billing.models import LedgerTransaction, Wallet
from billing.onboarding import team_create
from billing.services import ledger_post
from instances.lifecycle import instance_order
from instances.metering import metering_tick
from instances.models import Instance
from instances.provisioning import converge
from starverse.accounts.models import ApiToken, AuditEvent, Budget, Membership, User
from starverse.accounts.teams import invitation_accept, invitation_create, invitation_token
from tests.factories import PASSWORD, converge_until, fund, make_token, make_user


def bearer(user, **kwargs):
    _token, plaintext = make_token_for(user, **kwargs)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def make_token_for(user, team=None, scopes=None):
    from starverse.accounts.services import token_create

    return token_create(user=user, name="t", team_id=team.pk if team else None, scopes=scopes)


def fund_team(team, fen):
    ledger_post(
        wallet_id=Wallet.objects.get(tenant=team).pk,
        key=f"topup:test:{team.pk}:{fen}",
        kind=TransactionKind.TOPUP,
        amount_fen=fen,
        description="Top-up",
    )


def join(team, owner, person, role="member"):
    invitation = invitation_create(actor=owner, team=team, email=person.email, role=role)
    return invitation_accept(user=person, token=invitation_token(invitation))


@pytest.fixture
def team_of_two(db):
    owner, member = make_user(), make_user()
    team = team_create(user=owner, name="NLP lab")
    join(team, owner, member)
    return team, owner, member


def _order(client, catalog, **headers):
    return client.post(
        "/api/v1/instances",
        {"offering": catalog["h100x1"].id, "image": catalog["image"].id},
        format="json",
        **headers,
    )


def test_create_invite_budget_and_order_refused_past_it(catalog):
    """The issue's 'done when': a team, a second person invited, a budget, an order refused."""
    owner, member = make_user(), make_user()
    owner_api = bearer(owner)
    created = owner_api.post("/api/v1/teams", {"name": "Vision group"}, format="json")
    assert created.status_code == 201
    team_id = created.json()["id"]
    assert created.json()["role"] == "owner"

    invited = owner_api.post(
        f"/api/v1/teams/{team_id}/invitations", {"email": member.email}, format="json"
    )
    assert invited.status_code == 201
    token = invited.json()["link"].rstrip("/").rsplit("/", 1)[-1]
    accepted = bearer(member).post(f"/api/v1/teams/invitations/{token}/accept")
    assert accepted.status_code == 201
    assert accepted.json()["role"] == "member"

    budget = owner_api.put(
        f"/api/v1/teams/{team_id}/budgets",
        {"user": member.pk, "monthly_fen": 2000},
        format="json",
    )
    assert budget.status_code == 200
    assert budget.json() == {
        "user": member.pk,
        "email": member.email,
        "monthly_fen": 2000,
        "spent_fen": 0,
        "left_fen": 2000,
    }
    fund_team(Membership.objects.get(user=member).tenant, 100_000)
    from starverse.accounts.models import Tenant

    team = Tenant.objects.get(pk=team_id)
    refused = _order(bearer(member, team=team), catalog)

    assert refused.status_code == 402
    assert refused.json()["code"] == "budget_exceeded"
    assert refused.json()["detail"] == (
        "Your monthly budget in team Vision group is ¥20.00; ¥0.00 is spent; this order needs "
        "¥22.00 over its runway. Ask an owner to raise your budget."
    )
    assert not Instance.objects.filter(tenant_id=team_id).exists()

    owner_api.put(
        f"/api/v1/teams/{team_id}/budgets", {"user": member.pk, "monthly_fen": 2200}, format="json"
    )
    ordered = _order(bearer(member, team=team), catalog)
    assert ordered.status_code == 202
    instance = Instance.objects.get(pk=ordered.json()["id"])
    assert (instance.tenant_id, instance.created_by_id) == (team_id, member.pk)
    actions = list(AuditEvent.objects.filter(tenant_id=team_id).values_list("action", flat=True))
    assert set(actions) >= {
        "team.created",
        "invitation.created",
        "invitation.accepted",
        "budget.set",
        "token.created",
        "instance.ordered",
    }


def test_team_budget_refuses_too(catalog, team_of_two):
    team, owner, _member = team_of_two
    fund_team(team, 100_000)
    bearer(owner).put(
        f"/api/v1/teams/{team.pk}/budgets", {"user": None, "monthly_fen": 100}, format="json"
    )
    refused = _order(bearer(owner, team=team), catalog)
    assert refused.status_code == 402
    assert refused.json()["detail"].startswith("The monthly budget of team NLP lab is ¥1.00;")
    # the owner sets the budgets: told where, not to ask an owner
    assert refused.json()["detail"].endswith(
        "As an owner, you can raise the budget on the team's page."
    )


def test_what_a_member_already_runs_counts_against_their_budget(catalog, team_of_two):
    """Orders one after another cannot each fit the same money: an order needs its runway on
    top of an hour of what its orderer already runs by the hour (not what others run)."""
    team, owner, member = team_of_two
    fund_team(team, 1_000_000)
    Budget.objects.create(tenant=team, user=member, monthly_fen=5_000)  # ¥50; an H100 ¥22/h
    member_api, owner_api = bearer(member, team=team), bearer(owner, team=team)
    assert _order(owner_api, catalog, HTTP_IDEMPOTENCY_KEY="o1").status_code == 202  # not theirs
    first = _order(member_api, catalog, HTTP_IDEMPOTENCY_KEY="m1")
    assert first.status_code == 202
    assert _order(member_api, catalog, HTTP_IDEMPOTENCY_KEY="m2").status_code == 202  # 22 + 22

    refused = _order(member_api, catalog, HTTP_IDEMPOTENCY_KEY="m3")  # 22 + 44 > 50

    assert refused.status_code == 402
    assert refused.json() == {
        "detail": "Your monthly budget in team NLP lab is ¥50.00; ¥0.00 is spent, and what you "
        "already run costs ¥44.00 an hour; this order needs ¥22.00 over its runway on top of "
        "that. Stop something, or ask an owner to raise your budget.",
        "code": "budget_exceeded",
    }
    assert member_api.post(f"/api/v1/instances/{first.json()['id']}/stop").status_code == 202
    assert _order(member_api, catalog, HTTP_IDEMPOTENCY_KEY="m4").status_code == 202


def test_running_instances_stop_when_the_budget_is_spent(catalog, team_of_two):
    team, owner, member = team_of_two
    fund_team(team, 100_000)
    Budget.objects.create(tenant=team, user=member, monthly_fen=2200)
    member.act_for(team.pk, "member")
    mine, _ = instance_order(user=member, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1")
    owner.act_for(team.pk, "owner")
    theirs, _ = instance_order(user=owner, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1")
    for instance in (mine, theirs):
        assert converge_until(converge.provision, instance.id) == "running"
    start = Instance.objects.get(pk=mine.pk).running_since
    assert start is not None

    metering_tick(now=start + timedelta(minutes=30, seconds=1))
    assert Instance.objects.get(pk=mine.pk).status == "running"  # ¥11.00 of ¥22.00 spent

    result = metering_tick(now=start + timedelta(minutes=60, seconds=1))
    assert result.over_budget == [mine.pk]
    assert Instance.objects.get(pk=mine.pk).status == "stopping"
    assert Instance.objects.get(pk=theirs.pk).status == "running"
    last = Instance.objects.get(pk=mine.pk).events.order_by("at", "id").last()
    assert last is not None
    assert str(last.message) == "Budget spent: stopped (not deleted); disks kept."


def test_budget_below_spent_is_refused(catalog, team_of_two):
    team, owner, member = team_of_two
    fund_team(team, 100_000)
    member.act_for(team.pk, "member")
    instance, _ = instance_order(
        user=member, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1"
    )
    ledger_post(
        wallet_id=Wallet.objects.get(tenant=team).pk,
        key="usage:test:1",
        kind=TransactionKind.USAGE,
        amount_fen=-500,
        description="GPU usage",
        instance_id=instance.pk,
    )
    api = bearer(owner)
    refused = api.put(
        f"/api/v1/teams/{team.pk}/budgets", {"user": member.pk, "monthly_fen": 499}, format="json"
    )
    assert refused.status_code == 400
    assert refused.json()["code"] == "budget_below_spent"
    assert "¥5.00 already spent" in refused.json()["detail"]
    assert not Budget.objects.exists()
    ok = api.put(
        f"/api/v1/teams/{team.pk}/budgets", {"user": member.pk, "monthly_fen": 500}, format="json"
    )
    assert ok.json()["spent_fen"] == 500


def test_only_an_owner_sets_budgets(team_of_two):
    team, _owner, member = team_of_two
    refused = bearer(member).put(
        f"/api/v1/teams/{team.pk}/budgets", {"user": member.pk, "monthly_fen": 10**6}, format="json"
    )
    assert refused.status_code == 403
    assert refused.json()["code"] == "role_forbidden"
    assert not Budget.objects.exists()


def test_inviting_a_member_again_is_a_conflict(team_of_two):
    team, owner, member = team_of_two
    again = bearer(owner).post(
        f"/api/v1/teams/{team.pk}/invitations", {"email": member.email.upper()}, format="json"
    )
    assert again.status_code == 409
    assert again.json()["code"] == "already_member"


def test_a_member_cannot_invite(team_of_two):
    team, _owner, member = team_of_two
    refused = bearer(member).post(
        f"/api/v1/teams/{team.pk}/invitations", {"email": "x@lab.example.edu.cn"}, format="json"
    )
    assert refused.status_code == 403


def test_invitation_is_for_its_address_and_once(team_of_two):
    team, owner, _member = team_of_two
    stranger, invited = make_user(), make_user()
    invitation = invitation_create(actor=owner, team=team, email=invited.email, role="admin")
    token = invitation_token(invitation)

    wrong = bearer(stranger).post(f"/api/v1/teams/invitations/{token}/accept")
    assert (wrong.status_code, wrong.json()["code"]) == (403, "wrong_account")
    assert bearer(invited).post(f"/api/v1/teams/invitations/{token}/accept").status_code == 201
    again = bearer(invited).post(f"/api/v1/teams/invitations/{token}/accept")
    assert (again.status_code, again.json()["code"]) == (409, "already_accepted")
    bad = bearer(invited).post("/api/v1/teams/invitations/nonsense/accept")
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_link")


def test_the_last_owner_stays(team_of_two):
    team, owner, member = team_of_two
    api = bearer(owner)
    demote = api.patch(
        f"/api/v1/teams/{team.pk}/members/{owner.pk}", {"role": "admin"}, format="json"
    )
    assert (demote.status_code, demote.json()["code"]) == (409, "last_owner")
    remove = api.delete(f"/api/v1/teams/{team.pk}/members/{owner.pk}")
    assert (remove.status_code, remove.json()["code"]) == (409, "last_owner")
    assert Membership.objects.get(tenant=team, user=owner).role == "owner"

    assert (
        api.patch(
            f"/api/v1/teams/{team.pk}/members/{member.pk}", {"role": "owner"}, format="json"
        ).json()["role"]
        == "owner"
    )
    assert api.delete(f"/api/v1/teams/{team.pk}/members/{owner.pk}").status_code == 204
    assert not Membership.objects.filter(tenant=team, user=owner).exists()


def test_a_non_member_gets_404_for_the_team(team_of_two):
    team, _owner, _member = team_of_two
    stranger = bearer(make_user())
    for path in ("", "/members", "/invitations", "/budgets", "/audit"):
        assert stranger.get(f"/api/v1/teams/{team.pk}{path}").status_code == 404
    assert (
        stranger.post(
            f"/api/v1/teams/{team.pk}/transfers",
            {"amount_fen": 1, "direction": "to_team"},
            format="json",
        ).status_code
        == 404
    )


def test_members_see_team_objects_and_change_only_their_own(catalog, team_of_two):
    team, owner, member = team_of_two
    admin = make_user()
    join(team, owner, admin, role="admin")
    fund_team(team, 100_000)
    owner_team, member_team = bearer(owner, team=team), bearer(member, team=team)
    theirs = _order(owner_team, catalog).json()["id"]
    mine = _order(member_team, catalog).json()["id"]

    listed = {row["id"] for row in member_team.get("/api/v1/instances").json()["results"]}
    assert listed == {theirs, mine}
    assert member_team.get(f"/api/v1/instances/{theirs}").status_code == 200
    refused = member_team.post(f"/api/v1/instances/{theirs}/stop")
    assert (refused.status_code, refused.json()["code"]) == (403, "not_yours")
    refused = member_team.delete(f"/api/v1/instances/{theirs}")
    assert refused.status_code == 403
    assert Instance.objects.get(pk=theirs).status == "provisioning"

    assert member_team.post(f"/api/v1/instances/{mine}/stop").status_code == 202
    assert bearer(admin, team=team).post(f"/api/v1/instances/{theirs}/stop").status_code == 202

    # the same people in their own accounts, and a stranger, see none of it
    for client in (bearer(member), bearer(make_user())):
        assert client.get(f"/api/v1/instances/{theirs}").status_code == 404
        assert client.post(f"/api/v1/instances/{theirs}/stop").status_code == 404


def test_billing_role_reads_and_pays_but_orders_nothing(catalog, team_of_two):
    team, owner, _member = team_of_two
    payer = make_user()
    join(team, owner, payer, role="billing")
    fund_team(team, 100_000)
    client = bearer(payer, team=team)
    refused = _order(client, catalog)
    assert (refused.status_code, refused.json()["code"]) == (403, "role_forbidden")
    assert client.get("/api/v1/billing/balance").json()["total_fen"] == 100_000


def test_a_removed_member_loses_access_at_once(catalog, team_of_two, client):
    team, owner, member = team_of_two
    fund_team(team, 100_000)
    api = bearer(member, team=team)
    instance = _order(bearer(owner, team=team), catalog).json()["id"]
    assert api.get(f"/api/v1/instances/{instance}").status_code == 200
    client.force_login(member)
    client.post("/teams/switch/", {"team": team.pk})
    assert client.get("/console/instances/").content.count(instance.encode()) >= 1

    bearer(owner).delete(f"/api/v1/teams/{team.pk}/members/{member.pk}")

    assert api.get(f"/api/v1/instances/{instance}").status_code == 401
    assert not ApiToken.objects.filter(user=member, team=team, revoked_at__isnull=True).exists()
    assert instance.encode() not in client.get("/console/instances/").content
    assert client.get(f"/api/v1/instances/{instance}").status_code == 404


def test_token_of_a_deleted_membership_is_refused_even_unrevoked(team_of_two):
    team, _owner, member = team_of_two
    api = bearer(member, team=team)
    Membership.objects.filter(tenant=team, user=member).delete()
    assert api.get("/api/v1/instances").status_code == 401


def test_a_team_token_needs_membership(team_of_two):
    team, _owner, _member = team_of_two
    stranger = make_user()
    refused = bearer(stranger).post(
        "/api/v1/tokens", {"name": "ci", "team": team.pk}, format="json"
    )
    assert refused.status_code == 404
    assert not ApiToken.objects.filter(user=stranger, team=team).exists()


def test_scopes_limit_a_token(catalog, team_of_two):
    team, owner, _member = team_of_two
    reader = bearer(owner, scopes=["read"])
    assert reader.get("/api/v1/instances").status_code == 200
    refused = _order(reader, catalog)
    assert refused.status_code == 403
    assert refused.json()["code"] == "insufficient_scope"
    assert "instances scope" in refused.json()["detail"]
    teams_refused = reader.post("/api/v1/teams", {"name": "x"}, format="json")
    assert "admin scope" in teams_refused.json()["detail"]
    no_read = bearer(owner, scopes=["instances"])
    assert no_read.get("/api/v1/instances").json()["code"] == "insufficient_scope"
    created = (
        bearer(owner)
        .post(
            "/api/v1/tokens",
            {"name": "ci", "team": team.pk, "scopes": ["read", "billing"]},
            format="json",
        )
        .json()
    )
    assert (created["team"], created["scopes"]) == (team.pk, ["read", "billing"])
    bad = bearer(owner).post("/api/v1/tokens", {"name": "ci", "scopes": ["root"]}, format="json")
    assert bad.status_code == 400


def test_existing_tokens_keep_every_scope(user):
    token, _plaintext = make_token(user)
    assert token.scopes == ["read", "instances", "billing", "admin"]


def test_transfers_move_cash_once_and_never_trial(team_of_two):
    team, owner, member = team_of_two
    fund(member, 5_000)
    api = bearer(member)
    path = f"/api/v1/teams/{team.pk}/transfers"
    body = {"amount_fen": 3_000, "direction": "to_team"}
    first = api.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    again = api.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert (first.status_code, again.status_code) == (201, 201)
    assert first.json() == again.json()
    assert Wallet.objects.get(tenant=team).cash_fen == 3_000
    personal = Wallet.objects.get(tenant_id=member.tenant_id)
    assert (personal.cash_fen, personal.promo_fen) == (2_000, 1_000)
    conflict = api.post(
        path, {"amount_fen": 1, "direction": "to_team"}, format="json", HTTP_IDEMPOTENCY_KEY="k1"
    )
    assert conflict.status_code == 409

    # trial credit never moves: ¥20.00 cash and ¥10.00 trial cannot send ¥25.00
    short = api.post(path, {"amount_fen": 2_500, "direction": "to_team"}, format="json")
    assert short.status_code == 402
    assert Wallet.objects.get(tenant=team).cash_fen == 3_000

    out = api.post(path, {"amount_fen": 100, "direction": "from_team"}, format="json")
    assert (out.status_code, out.json()["code"]) == (403, "role_forbidden")
    assert (
        bearer(owner)
        .post(path, {"amount_fen": 100, "direction": "from_team"}, format="json")
        .status_code
        == 201
    )
    assert Wallet.objects.get(tenant=team).cash_fen == 2_900
    assert AuditEvent.objects.filter(tenant=team, action="transfer").count() == 2
    kinds = LedgerTransaction.objects.filter(kind=TransactionKind.TRANSFER).count()
    assert kinds == 4


def test_audit_log_for_managers_with_filters_and_csv(team_of_two):
    team, owner, member = team_of_two
    api = bearer(owner)
    listed = api.get(f"/api/v1/teams/{team.pk}/audit").json()
    actions = [row["action"] for row in listed["results"]]
    assert actions == ["invitation.accepted", "invitation.created", "team.created"]
    assert listed["results"][0]["actor_email"] == member.email
    only = api.get(f"/api/v1/teams/{team.pk}/audit", {"actor": owner.pk}).json()
    assert [row["action"] for row in only["results"]] == ["invitation.created", "team.created"]
    bad = api.get(f"/api/v1/teams/{team.pk}/audit", {"from": "yesterday"})
    assert (bad.status_code, "from" in bad.json()["detail"]) == (400, True)

    download = api.get(f"/api/v1/teams/{team.pk}/audit?format=csv")
    assert download.status_code == 200
    assert download["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(download.content.decode())))
    assert rows[0][:4] == ["at", "actor", "actor_email", "action"]
    assert [row[3] for row in rows[1:]] == actions

    refused = bearer(member).get(f"/api/v1/teams/{team.pk}/audit")
    assert refused.status_code == 403


@pytest.mark.parametrize(
    "moment",
    ["2026-12-01T08:00:00+25:00", "2026-12-01T08:00:00-24:00", "9999-12-31T23:00:00+08:00"],
)
def test_an_audit_time_that_no_calendar_holds_is_a_400_naming_it(team_of_two, moment):
    team, owner, _member = team_of_two

    answer = bearer(owner).get(f"/api/v1/teams/{team.pk}/audit", {"from": moment})

    assert (answer.status_code, answer.json()["code"]) == (400, "invalid")
    assert answer.json()["detail"] == (
        "from: a date (2026-12-01) or a time with zone (2026-12-01T08:00:00+08:00)."
    )


def test_the_console_audit_page_refuses_a_day_past_the_calendars_end(team_of_two, client):
    team, owner, _member = team_of_two
    client.force_login(owner)

    refused = client.get(f"/teams/{team.pk}/audit/", {"until": "9999-12-31"}, follow=True)

    assert refused.redirect_chain == [(f"/teams/{team.pk}/audit/", 302)]
    assert "Enter a date from 1900-01-01 to 9998-12-31." in refused.content.decode()


def test_an_address_that_would_be_a_formula_is_text_in_the_audit_csv(db):
    owner = make_user("=1+1@lab.example.edu.cn")
    team = team_create(user=owner, name="NLP lab")

    download = bearer(owner).get(f"/api/v1/teams/{team.pk}/audit?format=csv")

    rows = list(csv.reader(io.StringIO(download.content.decode())))
    assert [row[2:4] for row in rows[1:]] == [["'=1+1@lab.example.edu.cn", "team.created"]]


def test_saving_a_user_acting_for_a_team_keeps_their_own_tenant(team_of_two):
    team, _owner, member = team_of_two
    personal = member.tenant_id
    member.act_for(team.pk, "member")
    member.first_login_note = "x"
    member.save()
    assert member.tenant_id == team.pk
    assert User.objects.get(pk=member.pk).tenant_id == personal


def test_console_switch_and_team_pages(team_of_two, client):
    team, owner, member = team_of_two
    client.force_login(owner)
    assert client.post("/teams/switch/", {"team": team.pk}).status_code == 302
    page = client.get(f"/teams/{team.pk}/")
    assert page.status_code == 200
    assert member.email.encode() in page.content
    client.post(f"/teams/{team.pk}/act/budget/", {"user": member.pk, "amount": "50"})
    assert Budget.objects.get(tenant=team, user=member).monthly_fen == 5_000
    audit = client.get(f"/teams/{team.pk}/audit/?format=csv")
    assert b"budget.set" in audit.content
    dashboard = client.get("/console/").content.decode()
    assert "selected>NLP lab" in dashboard
    assert f"Signed in as {owner.email}, acting for the team NLP lab" in dashboard
    client.post("/teams/switch/", {"team": ""})
    assert f"Signed in as {owner.email}<" in client.get("/console/").content.decode()

    client.force_login(make_user())
    assert client.get(f"/teams/{team.pk}/").status_code == 404
    assert client.post("/teams/switch/", {"team": team.pk}).status_code == 302
    assert b"NLP lab" not in client.get("/console/").content


def test_console_invitation_link_joins(team_of_two, client):
    team, owner, _member = team_of_two
    newcomer = make_user()
    invitation = invitation_create(actor=owner, team=team, email=newcomer.email, role="member")
    client.login(email=newcomer.email, password=PASSWORD)
    client.force_login(newcomer)
    link = f"/teams/invitations/{invitation_token(invitation)}/"
    assert b"NLP lab" in client.get(link).content
    assert client.post(link).status_code == 302
    assert Membership.objects.filter(tenant=team, user=newcomer).exists()


def test_a_newcomer_signs_up_from_the_link_and_joins(team_of_two, client, settings):
    """Not signed in, the link says what it is and offers a sign-up with the invited address
    that comes back to the link; an outside `next` is not followed."""
    from urllib.parse import quote

    team, owner, _member = team_of_two
    settings.SIGNUP_THROTTLE_RATE = "100/hour"
    invitation = invitation_create(actor=owner, team=team, email="wang@lab.edu.cn", role="member")
    link = f"/teams/invitations/{invitation_token(invitation)}/"

    page = client.get(link)
    html = page.content.decode()
    assert page.status_code == 200
    assert "Join NLP lab" in html and "wang@lab.edu.cn" in html
    signup = f"/accounts/signup/?next={quote(link, safe='')}&amp;email=wang%40lab.edu.cn"
    assert f'href="{signup}"' in html
    form = client.get(signup.replace("&amp;", "&")).content.decode()
    assert 'value="wang@lab.edu.cn"' in form and f'name="next" value="{link}"' in form

    joined = client.post(
        "/accounts/signup/",
        {"email": "wang@lab.edu.cn", "password": "correct horse battery 9", "next": link},
    )
    assert joined.status_code == 302 and joined["Location"] == link
    assert client.post(link).status_code == 302
    newcomer = User.objects.get(email="wang@lab.edu.cn")
    assert Membership.objects.get(tenant=team, user=newcomer).role == "member"

    client.logout()
    elsewhere = client.post(
        "/accounts/signup/",
        {
            "email": "zhao@lab.edu.cn",
            "password": "correct horse battery 9",
            "next": "https://evil.example/",
        },
    )
    assert elsewhere["Location"] == "/console/"


def test_a_visitor_with_a_withdrawn_link_is_told_so(team_of_two, client):
    from starverse.accounts.teams import invitation_revoke

    team, owner, _member = team_of_two
    invitation = invitation_create(actor=owner, team=team, email="wang@lab.edu.cn", role="member")
    invitation_revoke(actor=owner, invitation=invitation)
    page = client.get(f"/teams/invitations/{invitation_token(invitation)}/")
    assert page.status_code == 400
    assert "This invitation was withdrawn." in page.content.decode()


def test_console_stop_of_anothers_instance_is_refused(catalog, team_of_two, client):
    team, owner, member = team_of_two
    fund_team(team, 100_000)
    theirs = _order(bearer(owner, team=team), catalog).json()["id"]
    client.force_login(member)
    client.post("/teams/switch/", {"team": team.pk})
    answer = client.post(f"/console/instances/{theirs}/stop/", follow=True)
    assert "ordered by another member" in answer.content.decode()
    assert Instance.objects.get(pk=theirs).status == "provisioning"


def test_a_teams_invoices_and_money_mail_are_for_its_payers(team_of_two, settings, tmp_path):
    """A plain member neither changes the invoice details nor requests a 发票 for the team
    (403 naming what they tried); a billing member does both. The team's money mail (receipts,
    runway warnings, invoices) goes to its owners, admins and billing members, not to every
    member and never to nobody."""
    from billing.notices import _recipients
    from tests.billing.test_invoices import PROFILE

    settings.MEDIA_ROOT = str(tmp_path)
    team, owner, member = team_of_two
    payer = make_user()
    join(team, owner, payer, role="billing")

    as_member = bearer(member, team=team)
    refused = as_member.put("/api/v1/billing/invoice-profile", PROFILE, format="json")
    assert (refused.status_code, refused.json()["code"]) == (403, "role_forbidden")
    assert "invoice details" in refused.json()["detail"]
    refused = as_member.post("/api/v1/billing/invoices", {"amount_fen": 100}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (403, "role_forbidden")

    as_payer = bearer(payer, team=team)
    saved = as_payer.put("/api/v1/billing/invoice-profile", PROFILE, format="json")
    assert saved.status_code == 200, saved.json()
    assert saved.json()["title"] == PROFILE["title"]

    assert sorted(_recipients(team.pk)) == sorted([owner.email, payer.email])
    assert _recipients(member.tenant_id) == [member.email]


def test_an_unverified_address_joins_only_through_the_emailed_link(team_of_two, client):
    """An account opened with an address its holder never proved joins no team by the API
    (403 `email_unverified`, no membership); opening the e-mailed link in the console proves
    the mailbox: the address is verified (with the trial it earns) and the person joins."""
    from billing.selectors import wallet_for_tenant

    team, owner, _member = team_of_two
    unverified = make_user(verified=False)
    invitation = invitation_create(actor=owner, team=team, email=unverified.email, role="member")
    token = invitation_token(invitation)

    refused = bearer(unverified).post(f"/api/v1/teams/invitations/{token}/accept")

    assert (refused.status_code, refused.json()["code"]) == (403, "email_unverified")
    assert not Membership.objects.filter(tenant=team, user=unverified).exists()
    client.force_login(unverified)
    assert client.post(f"/teams/invitations/{token}/").status_code == 302
    unverified.refresh_from_db()
    assert unverified.email_verified_at is not None
    assert Membership.objects.filter(tenant=team, user=unverified).exists()
    assert wallet_for_tenant(unverified.tenant_id).promo_fen == 1000


def test_a_team_invoices_the_paid_cash_moved_in_and_it_does_not_move_on(
    team_of_two, settings, tmp_path
):
    """A member's paid cash moved in is invoiceable under the team's title; moved out again
    after the 发票, the cash goes and the right to invoice it does not."""
    from tests.billing.test_invoices import PROFILE

    settings.MEDIA_ROOT = str(tmp_path)
    team, owner, member = team_of_two
    fund(member, 50_000)
    path = f"/api/v1/teams/{team.pk}/transfers"
    moved = bearer(member).post(path, {"amount_fen": 30_000, "direction": "to_team"}, format="json")
    assert moved.status_code == 201
    as_team = bearer(owner, team=team)
    as_team.put("/api/v1/billing/invoice-profile", PROFILE, format="json")
    assert as_team.get("/api/v1/billing/invoice-profile").json()["invoiceable_fen"] == 30_000

    made = as_team.post("/api/v1/billing/invoices", {"amount_fen": 30_000}, format="json")
    out = bearer(owner).post(path, {"amount_fen": 30_000, "direction": "from_team"}, format="json")

    assert (made.status_code, out.status_code) == (201, 201)
    assert Wallet.objects.get(tenant_id=owner.tenant_id).cash_fen == 30_000
    invoiceable = [
        bearer(person).get("/api/v1/billing/invoice-profile").json()["invoiceable_fen"]
        for person in (owner, member)
    ]
    assert invoiceable == [0, 20_000]
    assert as_team.get("/api/v1/billing/invoice-profile").json()["invoiceable_fen"] == 0
