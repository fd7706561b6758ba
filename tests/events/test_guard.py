"""The address guard: a webhook or bot URL may not point the platform at its own network —
loopback, private, link-local, shared and the cluster's ranges are refused, names that resolve
to them too, when saved and again at each send (DNS rebinding), unless WEBHOOK_ALLOWED_CIDRS
allows them; redirects are never followed."""

import ipaddress

import pytest
from django.db import transaction

from events.choices import EventType
from events.emit import emit
from events.guard import AddressRefused, address_allowed, resolve
from events.models import Webhook, WebhookDelivery
from events.webhooks import webhook_create
from starverse.core.errors import FieldInvalid
from tests.events.conftest import behave
from tests.factories import make_user


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.8.9.10",
        "::1",
        "10.1.2.3",
        "172.16.0.9",
        "192.168.1.1",
        "169.254.169.254",  # the cloud metadata service
        "fe80::1",
        "fc00::1",
        "100.64.0.1",
        "0.0.0.0",  # noqa: S104 (an address to refuse, not one to bind)
        "::ffff:127.0.0.1",
        "224.0.0.1",
    ],
)
def test_internal_addresses_are_refused(address, settings):
    settings.WEBHOOK_ALLOWED_CIDRS = []
    assert address_allowed(ipaddress.ip_address(address)) is False


def test_a_public_address_is_allowed_unless_in_the_clusters_ranges(settings):
    settings.WEBHOOK_ALLOWED_CIDRS = []
    assert address_allowed(ipaddress.ip_address("8.8.8.8")) is True
    settings.CLUSTER_NODE_CIDR = ["8.8.8.0/24"]
    assert address_allowed(ipaddress.ip_address("8.8.8.8")) is False


def test_the_operator_may_allow_an_internal_range(settings):
    settings.WEBHOOK_ALLOWED_CIDRS = ["10.20.0.0/16"]
    assert address_allowed(ipaddress.ip_address("10.20.3.4")) is True
    assert address_allowed(ipaddress.ip_address("10.21.3.4")) is False


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://localhost:8000/hook",  # a name that resolves to loopback
        "http://[::1]/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://2130706433/",  # 127.0.0.1 as one number
        "ftp://example.com/",
        "http://user:pass@8.8.8.8/",
        "http://no-such-host.invalid/",
    ],
)
def test_refused_urls_are_refused_when_saved(url, db, settings):
    settings.WEBHOOK_ALLOWED_CIDRS = []
    person = make_user()
    with pytest.raises(FieldInvalid) as refused:
        webhook_create(user=person, url=url, events=["job.failed"])
    assert refused.value.field == "url"
    assert not Webhook.objects.exists()


def test_a_name_is_checked_by_every_address_it_resolves_to(settings):
    settings.WEBHOOK_ALLOWED_CIDRS = []
    with pytest.raises(AddressRefused, match=r"127\.0\.0\.1"):
        resolve("http://localhost/")
    settings.WEBHOOK_ALLOWED_CIDRS = ["127.0.0.0/8", "::1/128"]
    assert resolve("http://localhost:81/a?b=1").path == "/a?b=1"


def test_an_address_allowed_when_saved_is_checked_again_at_send(
    bots, db, settings, django_capture_on_commit_callbacks
):
    """DNS rebinding: the name answered a public address when saved and an internal one at
    send time; here the operator's allowance stands in for the first answer."""
    person = make_user()
    webhook = webhook_create(
        user=person, url=f"{bots.url}/hook/rebound", events=["job.failed"]
    ).webhook
    settings.WEBHOOK_ALLOWED_CIDRS = []
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        emit(person.tenant_id, EventType.JOB_FAILED, {"id": "job_x"})
    row = WebhookDelivery.objects.get(webhook=webhook)
    assert row.status == "failed" and "internal address" in row.error
    assert row.response_status is None
    assert [e for e in bots.of("hook") if e["path"] == "rebound"] == []


def test_a_redirect_is_not_followed(bots, db, django_capture_on_commit_callbacks):
    person = make_user()
    webhook = webhook_create(user=person, url=f"{bots.url}/hook/moved", events=["job.failed"])
    behave(bots, "moved", status=302, location=f"{bots.url}/hook/elsewhere")
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        emit(person.tenant_id, EventType.JOB_FAILED, {"id": "job_x"})
    row = WebhookDelivery.objects.get(webhook=webhook.webhook)
    assert (row.status, row.response_status, row.error) == ("failed", 302, "HTTP 302")
    assert [e["path"] for e in bots.of("hook")] == ["moved"]
