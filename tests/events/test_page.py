"""The console's Webhooks page: a webhook added there shows its secret once and its
deliveries; a team's member sees the page but may change nothing; another tenant's webhook
cannot be touched through it."""

from django.test import Client

from billing.onboarding import team_create
from events.models import NotificationChannel, Webhook
from tests.factories import make_user, make_webhook
from tests.teams.test_team_changes import console
from tests.teams.test_teams import join


def test_add_a_webhook_and_a_channel_on_the_page(bots, db, django_capture_on_commit_callbacks):
    person = make_user()
    web = Client()
    web.force_login(person)
    assert web.get("/console/webhooks/").status_code == 200
    added = web.post(
        "/console/webhooks/",
        {"act": "add_webhook", "url": f"{bots.url}/hook/page", "events": ["job.failed"]},
    )
    webhook = Webhook.objects.get(tenant_id=person.tenant_id)
    assert added.status_code == 200 and webhook.secret in added.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        web.post("/console/webhooks/", {"act": "test_webhook", "id": webhook.id})
    page = web.get("/console/webhooks/").content.decode()
    assert "webhook.test" in page and webhook.secret not in page
    web.post("/console/webhooks/", {"act": "add_channel", "kind": "email"})
    made = NotificationChannel.objects.filter(tenant_id=person.tenant_id)  # the default, and this
    assert list(made.values_list("target", flat=True)) == [person.email, person.email]


def test_a_member_changes_nothing_and_a_stranger_reaches_nothing(bots, db):
    owner, member = make_user(), make_user()
    team = team_create(user=owner, name="Lab")
    join(team, owner, member)
    web = console(Client(), member, team)
    page = web.get("/console/webhooks/")
    assert "owners and admins" in page.content.decode()
    web.post(
        "/console/webhooks/",
        {"act": "add_webhook", "url": f"{bots.url}/hook/x", "events": ["job.failed"]},
    )
    assert not Webhook.objects.exists()
    theirs = make_webhook(make_user())
    stranger = Client()
    stranger.force_login(make_user())
    refused = stranger.post("/console/webhooks/", {"act": "delete_webhook", "id": theirs.id})
    assert refused.status_code == 404 and Webhook.objects.filter(pk=theirs.pk).exists()
