"""One spend rate: what a tenant's running pay-as-you-go instances cost per hour. The dashboard
shows it and the runway warnings are measured against it."""

from django.core import mail
from rest_framework.test import APIClient

from billing.choices import TransactionKind
from billing.models import Wallet
from billing.services import ledger_post
from events.models import Event
from instances import tasks
from instances.models import Instance
from instances.provisioning import converge
from instances.selectors import spend_per_hour_fen
from tests.factories import converge_until, fund, make_token, make_user


def test_the_runway_warning_and_the_dashboard_use_the_running_instances_price(
    catalog, django_capture_on_commit_callbacks
):
    user = make_user()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(user)[1]}")
    offering = catalog["h100x1"]
    price = offering.price_per_hour_fen
    fund(user, price)  # with the trial, a little more than an hour of it
    ordered = client.post(
        "/api/v1/instances",
        {"offering": offering.id, "image": catalog["image"].id},
        format="json",
    ).json()
    converge_until(converge.provision, ordered["id"])
    assert Instance.objects.get(pk=ordered["id"]).status == "running"
    other = make_user()  # a tenant with nothing running spends nothing

    assert spend_per_hour_fen() == {user.tenant_id: price}
    assert spend_per_hour_fen([other.tenant_id]) == {}

    wallet = Wallet.objects.get(tenant=user.tenant)
    ledger_post(  # spent down to half an hour of it
        wallet_id=wallet.id,
        key="usage:test:spend",
        kind=TransactionKind.USAGE,
        amount_fen=price // 2 - wallet.total_fen,
        description="usage",
    )
    with django_capture_on_commit_callbacks(execute=True):
        tasks.check_runways()
    assert len(mail.outbox) == 1 and mail.outbox[0].to == [user.email]
    event = Event.objects.get(tenant_id=user.tenant_id, type="balance.low")
    assert event.data["runway_minutes"] == 30  # half an hour left at this price

    console = APIClient()
    console.force_login(user)
    page = console.get("/console/").content.decode()
    assert f"¥{price / 100:,.2f}" in page
