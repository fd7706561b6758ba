"""Inference endpoints in a team follow the instances' rules: the billing role serves nothing,
a member changes only the endpoints they made (API and console), every change is in the audit
log, and the members' and the team's monthly budgets count endpoint usage, refuse what does
not fit and scale spent ones to zero."""

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.choices import TransactionKind
from billing.models import Wallet
from billing.services import ledger_post
from compute.metering import meter_tick
from compute.models import Offering
from endpoints.models import Endpoint, EndpointKey, EndpointReplica
from endpoints.services import endpoint_change, endpoints_over_budget_suspend, key_create
from instances.budgets import BudgetExceeded, budgets_of, spent_fen
from starverse.accounts.models import AuditEvent, Budget
from tests.endpoints.test_billing import _serving
from tests.factories import (
    _seed_catalog,
    holding_save,
    make_endpoint,
    make_public_model,
    make_user,
)
from tests.teams import test_team_changes
from tests.teams.test_team_changes import acting, actions, console
from tests.teams.test_teams import bearer, join

lab = test_team_changes.lab  # the fixture: a funded team, its owner, an admin, two members

H100 = "1× H100 80GB SXM"
NOT_YOURS = "ordered by another member"
BILLING_REFUSED = "Your role in this team (billing) does not allow ordering or changing resources."


def _body(**changes):
    _seed_catalog()
    return {
        "name": "qwen",
        "source": {"dataset": make_public_model().pk},
        "engine": "vllm",
        "offering": Offering.objects.get(name=H100).id,
        "min_replicas": 1,
        "max_replicas": 2,
        **changes,
    }


def _form(**changes):
    body = _body(**changes)
    return {
        "name": body["name"],
        "source_kind": "dataset",
        "dataset": body["source"]["dataset"],
        "engine": body["engine"],
        "offering": body["offering"],
        "min_replicas": str(body["min_replicas"]),
        "max_replicas": str(body["max_replicas"]),
    }


def _payer(team, owner):
    payer = make_user()
    join(team, owner, payer, role="billing")
    return payer


def test_the_billing_role_serves_no_endpoint_in_the_api_or_the_console(lab, client):
    team, owner, _admin, _ana, _bo = lab
    payer = _payer(team, owner)

    refused = bearer(payer, team=team).post("/api/v1/endpoints", _body(), format="json")
    assert (refused.status_code, refused.json()["code"]) == (403, "role_forbidden")
    console(client, payer, team)
    answer = client.post("/console/endpoints/new/", _form())
    assert answer.status_code == 200
    assert BILLING_REFUSED in answer.content.decode()

    assert not Endpoint.objects.filter(tenant=team).exists()
    assert not actions(team, action__startswith="endpoint.")


def test_console_changes_to_anothers_endpoint_are_for_its_creator_or_a_manager(lab, client):
    team, owner, admin, ana, bo = lab
    endpoint = make_endpoint(acting(ana, team, "member"))
    key, _secret = key_create(endpoint=endpoint, name="anas", user=ana)
    base = f"/console/endpoints/{endpoint.id}"

    for person, said in ((bo, NOT_YOURS), (_payer(team, owner), BILLING_REFUSED)):
        console(client, person, team)
        scaled = client.post(
            f"{base}/scale/", {"min_replicas": "0", "max_replicas": "5"}, follow=True
        )
        assert said in scaled.content.decode()
        made = client.post(f"{base}/keys/", {"name": "mine now"}, follow=True)
        assert said in made.content.decode()
        assert client.session.get(f"endpoint-key:{endpoint.id}") is None  # no key shown
        revoked = client.post(f"{base}/keys/{key.id}/revoke/", follow=True)
        assert said in revoked.content.decode()
        deleted = client.post(f"{base}/delete/", follow=True)
        assert said in deleted.content.decode()

    endpoint.refresh_from_db()
    assert (endpoint.min_replicas, endpoint.max_replicas, endpoint.status) == (1, 2, "provisioning")
    assert list(EndpointKey.objects.filter(endpoint=endpoint).values_list("pk", "revoked_at")) == [
        (key.pk, None)
    ]
    assert not actions(team, action__startswith="endpoint.")

    console(client, admin, team)
    client.post(f"{base}/scale/", {"min_replicas": "0", "max_replicas": "3"})
    client.post(f"{base}/keys/", {"name": "admins"})
    client.post(f"{base}/keys/{key.id}/revoke/")
    client.post(f"{base}/delete/")

    endpoint.refresh_from_db()
    assert (endpoint.min_replicas, endpoint.max_replicas, endpoint.status) == (0, 3, "deleting")
    assert EndpointKey.objects.get(pk=key.pk).revoked_at is not None
    assert EndpointKey.objects.filter(endpoint=endpoint, name="admins").exists()
    assert actions(team, actor=admin, action__startswith="endpoint.") == [
        "endpoint.changed",
        "endpoint.key_created",
        "endpoint.key_revoked",
        "endpoint.deleted",
    ]


def test_endpoint_changes_are_audited_from_the_api_and_the_console(lab, client):
    team, _owner, _admin, ana, _bo = lab
    api = bearer(ana, team=team)
    made = api.post("/api/v1/endpoints", _body(), format="json")
    assert made.status_code == 202
    first = made.json()["id"]
    assert (
        api.patch(f"/api/v1/endpoints/{first}", {"max_replicas": 3}, format="json").status_code
        == 202
    )
    key = api.post(f"/api/v1/endpoints/{first}/keys", {"name": "prod"}, format="json").json()["id"]
    assert api.delete(f"/api/v1/endpoints/{first}/keys/{key}").status_code == 204
    assert api.delete(f"/api/v1/endpoints/{first}").status_code == 202

    console(client, ana, team)
    answer = client.post("/console/endpoints/new/", _form(name="qwen-2"))
    assert answer.status_code == 302
    second = Endpoint.objects.get(tenant=team, name="qwen-2").id
    base = f"/console/endpoints/{second}"
    client.post(f"{base}/scale/", {"min_replicas": "1", "max_replicas": "4"})
    client.post(f"{base}/keys/", {"name": "laptop"})
    console_key = EndpointKey.objects.get(endpoint_id=second)
    client.post(f"{base}/keys/{console_key.id}/revoke/")
    client.post(f"{base}/delete/")

    expected = [
        "endpoint.created",
        "endpoint.changed",
        "endpoint.key_created",
        "endpoint.key_revoked",
        "endpoint.deleted",
    ]
    assert actions(team, actor=ana, object_id=first) == [
        "endpoint.created",
        "endpoint.changed",
        "endpoint.deleted",
    ]
    assert actions(team, actor=ana, action__startswith="endpoint.") == expected + expected
    events = {
        e.action: (e.object_type, e.object_id, e.data)
        for e in AuditEvent.objects.filter(tenant=team, action__startswith="endpoint.")
        if second in (e.object_id, e.data.get("endpoint"))
    }
    offering = Offering.objects.get(name=H100).id
    assert events == {
        "endpoint.created": ("endpoint", second, {"name": "qwen-2", "offering": offering}),
        "endpoint.changed": (
            "endpoint",
            second,
            {"min_replicas": 1, "max_replicas": 4, "update": False},
        ),
        "endpoint.key_created": (
            "endpointkey",
            console_key.id,
            {"endpoint": second, "name": "laptop"},
        ),
        "endpoint.key_revoked": ("endpointkey", console_key.id, {"endpoint": second}),
        "endpoint.deleted": ("endpoint", second, {"name": "qwen-2"}),
    }


def test_an_endpoint_past_the_budget_is_refused_naming_it(lab, client):
    team, _owner, _admin, ana, bo = lab
    Budget.objects.create(tenant=team, user=ana, monthly_fen=2000)
    api = bearer(ana, team=team)

    refused = api.post("/api/v1/endpoints", _body(), format="json")
    assert (refused.status_code, refused.json()["code"]) == (402, "budget_exceeded")
    assert refused.json()["detail"] == (
        "Your monthly budget in team Vision lab is ¥20.00; ¥0.00 is spent; this order needs "
        "¥22.00 over its runway. Ask an owner to raise your budget."
    )
    console(client, ana, team)
    answer = client.post("/console/endpoints/new/", _form())
    assert "Your monthly budget in team Vision lab is ¥20.00" in answer.content.decode()
    assert not Endpoint.objects.filter(tenant=team).exists()

    Budget.objects.filter(tenant=team, user=ana).update(monthly_fen=2200)
    endpoint = api.post("/api/v1/endpoints", _body(), format="json").json()["id"]
    refused = api.patch(f"/api/v1/endpoints/{endpoint}", {"min_replicas": 2}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (402, "budget_exceeded")
    assert "this order needs ¥44.00 over its runway" in refused.json()["detail"]
    scaled = client.post(
        f"/console/endpoints/{endpoint}/scale/",
        {"min_replicas": "2", "max_replicas": "2"},
        follow=True,
    )
    assert "Your monthly budget in team Vision lab is ¥22.00" in scaled.content.decode()
    assert Endpoint.objects.get(pk=endpoint).min_replicas == 1
    # more room to scale to, at the same minimum, is no new runway
    assert (
        api.patch(f"/api/v1/endpoints/{endpoint}", {"max_replicas": 4}, format="json").status_code
        == 202
    )

    Budget.objects.create(tenant=team, user=None, monthly_fen=3000)
    refused = bearer(bo, team=team).post("/api/v1/endpoints", _body(min_replicas=2), format="json")
    assert (refused.status_code, refused.json()["code"]) == (402, "budget_exceeded")
    assert refused.json()["detail"].startswith("The monthly budget of team Vision lab is ¥30.00;")
    assert actions(team, action__startswith="endpoint.") == ["endpoint.created", "endpoint.changed"]


def _charge(team, endpoint, minute, fen):
    ledger_post(
        wallet_id=Wallet.objects.get(tenant=team).pk,
        key=f"endpoint:epr_{endpoint.id}:1:{minute}",
        kind=TransactionKind.USAGE,
        amount_fen=-fen,
        description="Inference endpoint",
        instance_id=endpoint.id,
    )


def test_a_members_spend_counts_the_endpoints_they_made(lab):
    team, _owner, _admin, ana, bo = lab
    anas = make_endpoint(acting(ana, team, "member"))
    bos = make_endpoint(acting(bo, team, "member"), name="bos")
    _charge(team, anas, 1, 500)
    _charge(team, anas, 2, 250)
    _charge(team, bos, 1, 300)
    Budget.objects.create(tenant=team, user=ana, monthly_fen=10_000)

    assert (spent_fen(team.pk, ana.pk), spent_fen(team.pk, bo.pk)) == (750, 300)
    assert spent_fen(team.pk, None) == 1050
    assert [(s.budget.user_id, s.spent_fen, s.left_fen) for s in budgets_of(team.pk)] == [
        (ana.pk, 750, 9250)
    ]


def test_a_members_endpoints_scale_to_zero_when_their_budget_is_spent(lab, catalog, client):
    team, _owner, _admin, ana, bo = lab
    Budget.objects.create(tenant=team, user=ana, monthly_fen=2200)
    anas = _serving(make_endpoint(acting(ana, team, "member"), min_replicas=1, max_replicas=1))
    bos = make_endpoint(acting(bo, team, "member"), name="bos", min_replicas=0, max_replicas=1)
    now = timezone.now()

    meter_tick(now=now + timedelta(minutes=30))  # ¥11.00 of ¥22.00
    assert Endpoint.objects.get(pk=anas.id).suspended is False
    meter_tick(now=now + timedelta(minutes=61))  # the tick that spends it checks the budgets

    anas.refresh_from_db()
    reason = (
        f"The monthly budget of {ana.email} in team Vision lab is spent: scaled to zero "
        "(settings and snapshot kept). Scale it up again once an owner raises the budget or a "
        "new month begins."
    )
    assert (anas.suspended, anas.status, anas.error_message) == (True, "scaled_to_zero", reason)
    assert (anas.min_replicas, anas.max_replicas) == (1, 1)  # kept
    assert Endpoint.objects.get(pk=bos.id).suspended is False
    console(client, ana, team)
    assert reason in client.get(f"/console/endpoints/{anas.id}/").content.decode()
    # scaling it up again is an order its budget no longer fits
    with pytest.raises(BudgetExceeded):
        endpoint_change(endpoint=anas, min_replicas=1)
    assert Endpoint.objects.get(pk=anas.id).suspended is True


def test_every_endpoint_of_the_team_scales_to_zero_when_the_teams_budget_is_spent(lab):
    team, _owner, _admin, ana, bo = lab
    anas = make_endpoint(acting(ana, team, "member"))
    bos = make_endpoint(acting(bo, team, "member"), name="bos", min_replicas=0)
    _charge(team, anas, 1, 700)
    Budget.objects.create(tenant=team, user=bo, monthly_fen=5000)  # bo's own is not spent
    assert endpoints_over_budget_suspend() == []

    Budget.objects.create(tenant=team, user=None, monthly_fen=700)

    assert sorted(endpoints_over_budget_suspend()) == sorted([anas.id, bos.id])
    reason = (
        "The monthly budget of team Vision lab is spent: scaled to zero (settings and snapshot "
        "kept). Scale it up again once an owner raises the budget or a new month begins."
    )
    assert (
        list(
            Endpoint.objects.filter(tenant=team).values_list("suspended", "status", "error_message")
        )
        == [(True, "scaled_to_zero", reason)] * 2
    )
    assert endpoints_over_budget_suspend() == []  # once
    with pytest.raises(BudgetExceeded):
        endpoint_change(endpoint=bos, min_replicas=0)  # lifting the suspension is an order
    assert Endpoint.objects.get(pk=bos.id).suspended is True


def test_what_a_members_endpoints_serve_counts_toward_their_next_order(lab, catalog):
    """An order fits a budget on top of an hour of everything its orderer runs by the hour:
    their endpoints' replicas up now count (¥22/h each), as their instances do; others'
    endpoints count only toward the team's budget, and an endpoint's own replicas not toward
    its own scaling."""
    team, _owner, _admin, ana, bo = lab
    anas = make_endpoint(acting(ana, team, "member"))
    bos = make_endpoint(acting(bo, team, "member"), name="bos")
    for endpoint, pod, gone in (
        (anas, "anas-0", None),
        (bos, "bos-0", None),
        (bos, "bos-old", timezone.now()),
    ):
        replica = EndpointReplica.objects.create(endpoint=endpoint, pod_name=pod, gone_at=gone)
        holding_save(replica, waiting=False)
    Budget.objects.create(tenant=team, user=ana, monthly_fen=4000)  # ¥40
    h100 = catalog["h100x1"]  # ¥22 an hour: ¥22 + ¥22 > ¥40

    def order(person, key):
        return bearer(person, team=team).post(
            "/api/v1/instances",
            {"offering": h100.id, "image": "pytorch-2.1"},
            format="json",
            HTTP_IDEMPOTENCY_KEY=key,
        )

    refused = order(ana, "a1")
    assert (refused.status_code, refused.json()["code"]) == (402, "budget_exceeded")
    assert refused.json()["detail"] == (
        "Your monthly budget in team Vision lab is ¥40.00; ¥0.00 is spent, and what you "
        "already run costs ¥22.00 an hour; this order needs ¥22.00 over its runway on top of "
        "that. Stop something, or ask an owner to raise your budget."
    )
    b1 = order(bo, "b1")
    assert b1.status_code == 202, b1.json()  # bo has no budget of his own
    # the team's budget counts every member's endpoint and instance: ¥22 + ¥22 + ¥22 + ¥22
    Budget.objects.create(tenant=team, user=None, monthly_fen=8700)
    team_refused = order(bo, "b2")
    assert team_refused.json()["detail"].startswith(
        "The monthly budget of team Vision lab is ¥87.00; ¥0.00 is spent, and what the team "
        "already runs costs ¥66.00 an hour;"
    )
    # scaling ana's own endpoint needs its new hour, not its running replica again
    Budget.objects.filter(tenant=team, user=None).delete()
    Budget.objects.filter(tenant=team, user=ana).update(monthly_fen=4400)
    endpoint_change(endpoint=anas, min_replicas=2, max_replicas=2)
    assert Endpoint.objects.get(pk=anas.pk).min_replicas == 2


def _ready_disk(person, team, role, name):
    from tests.factories import make_disk

    disk = make_disk(acting(person, team, role), name)
    type(disk).objects.filter(pk=disk.pk).update(status="available", k8s_name=f"cd-{name}")
    person.refresh_from_db()
    return disk


def test_a_member_serves_only_their_own_disk_as_orders_use_it(lab, client):
    """A disk of another member (or of the owner) is not a member's to serve, at creation (API
    and console) as at an update of the source; owners and admins may serve any of the team."""
    team, owner, admin, ana, bo = lab
    bos = _ready_disk(bo, team, "member", "bos")
    anas = _ready_disk(ana, team, "member", "anas")
    body = _body(source={"disk": bos.pk, "path": "ckpt"})

    refused = bearer(ana, team=team).post("/api/v1/endpoints", body, format="json")
    console(client, ana, team)
    form = {**_form(), "source_kind": "disk", "disk": bos.pk, "path": "ckpt"}
    page = client.post("/console/endpoints/new/", form)

    assert (refused.status_code, refused.json()["code"]) == (403, "not_yours")
    assert NOT_YOURS in page.content.decode()
    assert not Endpoint.objects.filter(tenant=team).exists()
    own = bearer(ana, team=team).post(
        "/api/v1/endpoints", _body(source={"disk": anas.pk, "path": "ckpt"}), format="json"
    )
    assert own.status_code == 202
    by_admin = bearer(admin, team=team).post("/api/v1/endpoints", body, format="json")
    assert by_admin.status_code == 202

    # the admin, demoted to member, may no longer take a new snapshot of bo's disk
    from teams.services import membership_role_set

    membership_role_set(actor=owner, team=team, user_id=admin.pk, role="member")
    update = bearer(admin, team=team).patch(
        f"/api/v1/endpoints/{by_admin.json()['id']}", {"update": True}, format="json"
    )
    assert (update.status_code, update.json()["code"]) == (403, "not_yours")
    assert Endpoint.objects.get(pk=by_admin.json()["id"]).generation == 1
