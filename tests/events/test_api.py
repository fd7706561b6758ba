"""The webhooks' REST routes as the issue writes them: 201 {id, secret} with the secret shown
once, the list, a webhook's reads and changes, its deliveries, a redelivery with the same event
id, a test event and a secret rotation; another tenant's webhook is a 404; a team's webhooks
are its owners' and admins' (a member 403, a removed member 404)."""

import json

import pytest

from billing.onboarding import team_create
from events.models import Webhook, WebhookDelivery
from teams.services import membership_remove
from tests.factories import make_user
from tests.teams.test_teams import bearer, join


@pytest.fixture
def person_api(bots, client_for):
    person = make_user()
    return person, client_for(person)


def _create(client, bots, name="ci", **extra):
    body = {"url": f"{bots.url}/hook/{name}", "events": ["job.failed"], **extra}
    return client.post("/api/v1/webhooks", body, format="json")


def test_create_answers_the_secret_once(person_api, bots):
    _person, client = person_api
    made = _create(client, bots, description="CI")
    assert made.status_code == 201
    body = made.json()
    assert body["secret"].startswith("whsec_") and body["id"].startswith("wh_")
    assert (body["events"], body["description"], body["status"]) == (
        ["job.failed"],
        "CI",
        "enabled",
    )
    listed = client.get("/api/v1/webhooks").json()
    assert listed["count"] == 1 and "secret" not in listed["results"][0]
    assert "secret" not in client.get(f"/api/v1/webhooks/{body['id']}").json()


def test_bad_input_is_refused_with_the_field(person_api, bots, settings):
    _person, client = person_api
    unknown = _create(client, bots, events=["job.exploded"])
    assert unknown.status_code == 400 and "job.exploded" in unknown.json()["detail"]
    settings.WEBHOOK_ALLOWED_CIDRS = []
    internal = _create(client, bots)
    assert (internal.status_code, internal.json()["code"]) == (400, "url_refused")
    assert not Webhook.objects.exists()


def test_change_list_deliveries_redeliver_test_and_delete(
    person_api, bots, django_capture_on_commit_callbacks
):
    _person, client = person_api
    hook_id = _create(client, bots).json()["id"]
    changed = client.patch(
        f"/api/v1/webhooks/{hook_id}", {"events": ["job.failed", "job.succeeded"]}, format="json"
    )
    assert changed.status_code == 200 and changed.json()["events"] == [
        "job.failed",
        "job.succeeded",
    ]
    with django_capture_on_commit_callbacks(execute=True):
        tested = client.post(f"/api/v1/webhooks/{hook_id}/test")
    assert tested.status_code == 202 and tested.json()["type"] == "webhook.test"
    [sent] = bots.of("hook")
    event_id = json.loads(sent["body"])["id"]
    deliveries = client.get(f"/api/v1/webhooks/{hook_id}/deliveries").json()
    assert deliveries["count"] == 1
    first = deliveries["results"][0]
    assert (first["event"], first["status"], first["response_status"]) == (
        event_id,
        "succeeded",
        200,
    )
    assert first["duration_ms"] is not None
    with django_capture_on_commit_callbacks(execute=True):
        again = client.post(f"/api/v1/webhooks/{hook_id}/deliveries/{first['id']}/redeliver")
    assert again.status_code == 202 and again.json()["event"] == event_id
    assert [json.loads(e["body"])["id"] for e in bots.of("hook")] == [event_id, event_id]
    missing = client.post(f"/api/v1/webhooks/{hook_id}/deliveries/whd_nope/redeliver")
    assert missing.status_code == 404
    assert client.delete(f"/api/v1/webhooks/{hook_id}").status_code == 204
    assert not Webhook.objects.exists() and not WebhookDelivery.objects.exists()


def test_rotate_secret_answers_the_new_one_and_keeps_the_old_a_day(person_api, bots):
    _person, client = person_api
    made = _create(client, bots).json()
    rotated = client.post(f"/api/v1/webhooks/{made['id']}/rotate-secret")
    assert rotated.status_code == 200
    assert rotated.json()["secret"] not in (made["secret"], "")
    webhook = Webhook.objects.get(pk=made["id"])
    assert (webhook.secret, webhook.previous_secret) == (rotated.json()["secret"], made["secret"])
    assert rotated.json()["previous_secret_valid_until"] is not None


def test_enabling_again_clears_the_failure(person_api, bots):
    _person, client = person_api
    hook_id = _create(client, bots).json()["id"]
    Webhook.objects.filter(pk=hook_id).update(status="disabled", disabled_reason="failing")
    enabled = client.patch(f"/api/v1/webhooks/{hook_id}", {"enabled": True}, format="json")
    assert (enabled.json()["status"], enabled.json()["disabled_reason"]) == ("enabled", "")


def test_another_tenants_webhook_is_a_404_and_unchanged(person_api, bots, client_for):
    _person, client = person_api
    made = _create(client, bots).json()
    stranger = client_for(make_user())
    base = f"/api/v1/webhooks/{made['id']}"
    answers = [
        stranger.get(base),
        stranger.patch(base, {"description": "mine"}, format="json"),
        stranger.delete(base),
        stranger.get(f"{base}/deliveries"),
        stranger.post(f"{base}/test"),
        stranger.post(f"{base}/rotate-secret"),
        stranger.post(f"{base}/deliveries/whd_x/redeliver"),
    ]
    assert [a.status_code for a in answers] == [404] * 7
    assert stranger.get("/api/v1/webhooks").json()["count"] == 0
    webhook = Webhook.objects.get(pk=made["id"])
    assert (webhook.description, webhook.secret) == ("", made["secret"])
    assert bots.of("hook") == []


def test_a_teams_webhooks_are_its_admins(bots, db):
    owner, admin, member = make_user(), make_user(), make_user()
    team = team_create(user=owner, name="Lab")
    join(team, owner, admin, role="admin")
    join(team, owner, member)
    as_admin = bearer(admin, team=team)
    made = _create(as_admin, bots)
    assert made.status_code == 201
    assert Webhook.objects.get().tenant_id == team.pk
    as_member = bearer(member, team=team)
    refused = [
        as_member.get("/api/v1/webhooks"),
        _create(as_member, bots, name="mine"),
        as_member.delete(f"/api/v1/webhooks/{made.json()['id']}"),
    ]
    assert [(r.status_code, r.json()["code"]) for r in refused] == [(403, "role_forbidden")] * 3
    assert Webhook.objects.count() == 1
    # the admin's own account does not see the team's
    assert bearer(admin).get("/api/v1/webhooks").json()["count"] == 0
    membership_remove(actor=owner, team=team, user_id=admin.pk)
    gone = bearer(admin).get(f"/api/v1/webhooks/{made.json()['id']}")
    assert gone.status_code == 404
    assert bearer(owner, team=team).get("/api/v1/webhooks").json()["count"] == 1
