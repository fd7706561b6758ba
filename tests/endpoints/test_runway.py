"""The runway notices (endpoints.tasks.check_runways) count what a tenant's Ready endpoint
replicas burn together with its running instances: a balance that lasts an hour of the
instance alone is told it lasts half an hour once an endpoint of the same price serves."""

import time

from django.core import mail

from billing.choices import RunwayLevel, TransactionKind
from billing.models import RunwayNotice
from billing.selectors import wallet_for_tenant
from billing.services import ledger_post
from endpoints.models import Endpoint
from endpoints.provisioning import endpoint_converge
from endpoints.scheduler import endpoints_sync
from endpoints.selectors import endpoint_spend_per_hour_fen
from endpoints.tasks import check_runways
from instances.selectors import spend_per_hour_fen
from starverse.core.money import format_fen
from tests.factories import make_endpoint, make_instance, make_user


def _until(condition, timeout=15.0, step=None):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        if step is not None:
            step()
        time.sleep(0.02)


def test_the_runway_counts_an_endpoints_spend_with_the_instances(
    catalog, django_capture_on_commit_callbacks
):
    user = make_user()
    instance = make_instance(user, "running")
    endpoint = make_endpoint(user, min_replicas=1, max_replicas=1)
    price = instance.offering.price_per_hour_fen
    assert endpoint.offering.price_per_hour_fen == price
    # the balance: exactly an hour of the instance alone
    wallet = wallet_for_tenant(user.tenant_id)
    ledger_post(
        wallet_id=wallet.id,
        key=f"usage:runway-test:{user.id}",
        kind=TransactionKind.USAGE,
        amount_fen=price - wallet.total_fen,
        description="t",
    )
    assert wallet_for_tenant(user.tenant_id).total_fen == price

    check_runways()  # the endpoint serves nothing yet: an hour left, nothing to tell
    assert mail.outbox == []
    assert spend_per_hour_fen().get(user.tenant_id) == price

    endpoint_converge(endpoint.id)
    _until(lambda: Endpoint.objects.get(pk=endpoint.pk).status == "running", step=endpoints_sync)
    endpoints_sync()  # the Ready replica's session opens
    assert endpoint_spend_per_hour_fen() == {user.tenant_id: price}

    with django_capture_on_commit_callbacks(execute=True):
        check_runways()

    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == [user.email]
    assert mail.outbox[0].subject == (  # at twice the price: the instance and the endpoint
        f"Your balance is low: {format_fen(price)} left, about 30 minutes at your current "
        "spend. Top up to keep running."
    )
    notice = RunwayNotice.objects.get(wallet_id=wallet.id)
    assert notice.level == RunwayLevel.BELOW_HOUR
    check_runways()  # told once per crossing
    assert len(mail.outbox) == 1
