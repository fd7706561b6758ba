"""The queue serves orders that can pay, and accounts have limits. Placement from the queue
checks the runway again under the wallet lock, counting what the tenant's instances already
burn; an order that cannot pay is passed over, and fails at no cost after its grace unless a
top-up covers it. Per-account limits (orders queued, GPUs held and queued, premium GPUs on trial
credit) refuse with 429/409, a code, and how to raise them; operators raise them in the admin."""

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import LedgerTransaction, Wallet
from billing.payments import bank_transfer_post
from compute.models import Allocation, Offering
from instances.lifecycle import (
    instance_order,
    instance_start,
    instance_terminate,
    queue_drain,
    queue_review,
)
from instances.models import Instance
from instances.provisioning import converge
from starverse.core.adminurls import admin_change_url
from starverse.core.errors import Conflict, TooManyRequests
from tests.factories import (
    converge_until,
    fund,
    holding_of,
    make_instance,
    make_operator,
    make_user,
    staff_login,
)

RTX = "NVIDIA GeForce RTX 4090"
IMAGE = "pytorch-2.1"


def _offering(name):
    return Offering.objects.get(name=name)


def _order(user, name):
    instance, _created = instance_order(user=user, offering_id=_offering(name).id, image_id=IMAGE)
    return instance


def _post(client, name):
    return client.post(
        "/api/v1/instances", {"offering": _offering(name).id, "image": IMAGE}, format="json"
    )


def _free(instance):
    """Terminate an instance and give its GPUs back, without serving the queue (the test does)."""
    instance_terminate(instance_id=instance.id)
    assert converge_until(converge.terminate, instance.id) == "terminated"


def _ledger(user):
    wallet = Wallet.objects.get(tenant=user.tenant)
    return (
        wallet.cash_fen,
        wallet.promo_fen,
        LedgerTransaction.objects.filter(wallet=wallet).count(),
    )


@pytest.fixture
def full_rtx(catalog):
    """The one RTX 4090 node, taken whole by another paying account."""
    owner = make_user()
    fund(owner, 100_000)
    instance = _order(owner, "8× RTX 4090 24GB")
    assert instance.status == "provisioning"
    return instance


@pytest.fixture
def crowded(full_rtx):
    """A trial account (¥10) that queued five 2-GPU orders (¥4.40 an hour each: each one alone
    is covered), then a paying account's 4-GPU order behind them; then the node frees and the
    queue is served."""
    trial = make_user()
    trial_orders = [_order(trial, "2× RTX 4090 24GB") for _ in range(5)]
    payer = make_user()
    fund(payer, 100_000)
    paying = _order(payer, "4× RTX 4090 24GB")
    assert {i.status for i in [*trial_orders, paying]} == {"queued"}
    _free(full_rtx)
    now = timezone.now()
    placed = queue_drain(product=RTX, now=now)
    return {
        "trial": trial,
        "orders": trial_orders,
        "payer": payer,
        "paying": paying,
        "placed": placed,
        "now": now,
    }


def test_a_trial_account_with_many_queued_orders_does_not_take_freed_gpus_from_a_payer(
    crowded, settings
):
    orders, paying, now = crowded["orders"], crowded["paying"], crowded["now"]
    grace = timedelta(minutes=settings.QUEUE_UNFUNDED_GRACE_MINUTES)
    until = timezone.localtime(now + grace).strftime("%Y-%m-%d %H:%M")

    # two of the trial's orders are covered together (¥8.80 of ¥10), a third would not be
    assert crowded["placed"] == [orders[0].id, orders[1].id, paying.id]
    for waiting in orders[2:]:
        waiting.refresh_from_db()
        assert (waiting.status, holding_of(waiting).unfunded_since) == ("queued", now)
        assert Allocation.objects.filter(holding__instance=waiting).count() == 0
    assert orders[2].events.last().text == (
        "Your trial credit of ¥10.00 does not cover ¥13.20 at the trial prices: one hour of "
        "this order (¥4.40) plus one hour of your running instances that have a trial price "
        "(¥8.80); nor does your cash balance of ¥0.00 cover ¥13.20 at the standard prices. "
        "Orders that can pay are served first. Top up before "
        f"{until} to keep this order; after that it fails, at no cost."
    )
    assert Allocation.objects.filter(holding__instance=paying).count() == 4


def test_an_unfunded_order_fails_after_its_grace_and_costs_nothing(crowded, settings):
    trial, orders, now = crowded["trial"], crowded["orders"], crowded["now"]
    before = _ledger(trial)
    grace = timedelta(minutes=settings.QUEUE_UNFUNDED_GRACE_MINUTES)

    assert queue_review(now=now + grace - timedelta(seconds=1)) == []
    assert {Instance.objects.get(pk=o.id).status for o in orders[2:]} == {"queued"}
    assert queue_review(now=now + grace) == []

    for failed in orders[2:]:
        failed.refresh_from_db()
        assert (failed.status, holding_of(failed).queued_at, failed.cost_fen) == ("failed", None, 0)
        assert failed.error_message == (
            "Neither your trial credit of ¥10.00 covered ¥13.20 at the trial prices (one hour "
            "of this order, ¥4.40, plus one hour of your running instances that have a trial "
            "price, ¥8.80) nor your cash balance of ¥0.00 ¥13.20 at the standard prices while "
            "this order waited; nothing was charged. Top up and order again."
        )
    assert _ledger(trial) == before
    assert not LedgerTransaction.objects.filter(instance_id__in=[o.id for o in orders]).exists()


def test_a_top_up_within_the_grace_gets_the_order_placed(
    crowded, django_capture_on_commit_callbacks
):
    trial, orders = crowded["trial"], crowded["orders"]
    _free(crowded["paying"])  # four GPUs free again

    with django_capture_on_commit_callbacks(execute=True):
        bank_transfer_post(
            wallet_id=trial.tenant.wallet.id,
            amount_fen=2_000,
            payer="Zhejiang University",
            reference="ICBC-2026-1201-0007",
            reason="lab budget",
            actor=make_operator(),
        )

    # ¥20 of cash now: two more 2-GPU orders are covered (¥17.60 an hour in all), and fit
    rows = [Instance.objects.get(pk=o.id) for o in orders]
    assert [Allocation.objects.filter(holding__instance=row).count() for row in rows] == [
        2,
        2,
        2,
        2,
        0,
    ]
    assert [holding_of(row).unfunded_since for row in rows[2:4]] == [None, None]
    assert rows[4].status == "queued"
    assert holding_of(rows[4]).unfunded_since is not None  # ¥22.00 needed: still passed over
    assert "The balance covers this order again; it waits for GPUs in line." in [
        event.text for event in rows[2].events.all()
    ]


def test_an_unfunded_order_does_not_hold_up_a_new_paying_order(crowded):
    _free(crowded["paying"])  # four GPUs free; the trial's three unfunded orders still wait
    newcomer = make_user()
    fund(newcomer, 100_000)

    instance = _order(newcomer, "2× RTX 4090 24GB")

    assert instance.status == "provisioning"
    assert Allocation.objects.filter(holding__instance=instance).count() == 2


def test_the_runway_counts_what_running_instances_burn(catalog, client_for):
    user = make_user()
    fund(user, 3_000)  # ¥30 of cash beside the ¥10 trial credit
    client = client_for(user)
    running = Instance.objects.get(pk=_post(client, "1× A100 80GB SXM").json()["id"])
    assert converge_until(converge.provision, running.id) == "running"
    assert _post(client, "2× A100 80GB SXM").json()["status"] == "provisioning"  # ¥25.50 of ¥30

    refused = _post(client, "2× A100 80GB SXM")  # no trial price: cash only

    assert refused.status_code == 402
    body = refused.json()
    assert body["code"] == "insufficient_balance"
    assert body["detail"].startswith(
        "Your cash balance of ¥30.00 does not cover ¥42.50: one hour of this instance "
        "(¥17.00) plus one hour of what your running instances burn (¥25.50). Your trial credit "
        "of ¥10.00 does not pay for this offering; it pays for "
    )
    assert body["detail"].endswith(". Top up to continue.")
    assert Instance.objects.filter(tenant=user.tenant).count() == 2


def test_the_queued_orders_limit_is_429_saying_how_to_raise_it(full_rtx, client_for):
    user = make_user()
    fund(user, 100_000)
    client = client_for(user)
    for _ in range(5):
        assert _post(client, "1× RTX 4090 24GB").json()["status"] == "queued"

    refused = _post(client, "1× RTX 4090 24GB")

    assert refused.status_code == 429
    assert refused.json() == {
        "detail": "Your account may have at most 5 orders waiting in the queue, and 5 are "
        "waiting. Wait for one to start or cancel one, or ask support to raise your "
        "queued-orders limit.",
        "code": "queue_limit",
    }
    assert Instance.objects.filter(tenant=user.tenant).count() == 5


def test_the_gpu_limit_is_409_saying_how_to_raise_it(catalog, client_for, settings):
    settings.MAX_RUNNING_GPUS = 16  # two whole nodes
    user = make_user()
    fund(user, 1_000_000)
    client = client_for(user)
    for _ in range(2):
        assert _post(client, "8× H100 80GB SXM bare metal").status_code == 202

    refused = _post(client, "1× A100 80GB SXM")

    assert refused.status_code == 409
    assert refused.json() == {
        "detail": "Your account may hold at most 16 GPUs, starting, running and queued "
        "together; you have 16 and this needs 1 more. Stop or terminate an instance, or ask "
        "support to raise your GPU limit.",
        "code": "gpu_limit",
    }
    assert Instance.objects.filter(tenant=user.tenant).count() == 2


def test_a_trial_account_gets_no_premium_gpus_until_it_tops_up(catalog, client_for, settings):
    settings.TRIAL_MAX_PREMIUM_GPUS = 0  # an operator who offers no premium GPUs on trial
    user = make_user()  # ¥10 of trial credit: 12 hours of one A100 at its trial price
    client = client_for(user)

    refused = _post(client, "1× A100 80GB SXM")

    assert refused.status_code == 409
    assert refused.json() == {
        "detail": "An account on trial credit may hold at most 0 GPUs of the premium models "
        "(A100 80GB SXM, H100 80GB SXM), queued ones included; you have 0 and this needs 1 "
        "more. Top up any amount to lift this limit.",
        "code": "trial_limit",
    }
    assert Instance.objects.filter(tenant=user.tenant).count() == 0
    assert _post(client, "1× RTX 4090 24GB").status_code == 202  # the trial is for these
    fund(user, 1_000)
    assert _post(client, "1× A100 80GB SXM").status_code == 202


def test_an_operator_raises_an_accounts_limit_in_the_admin(full_rtx, client_for, client, settings):
    settings.MAX_RUNNING_GPUS = 16
    user = make_user()
    fund(user, 100_000)
    api = client_for(user)
    for _ in range(5):
        assert _post(api, "1× RTX 4090 24GB").status_code == 202
    assert _post(api, "1× RTX 4090 24GB").status_code == 429
    staff_login(client, make_operator())
    tenant_page = client.get(admin_change_url("accounts_tenant", user.tenant_id))
    assert tenant_page.status_code == 200
    assert 'name="limits-0-max_queued_orders"' in tenant_page.content.decode()

    saved = client.post(
        "/admin/compute/tenantlimits/add/",
        {
            "tenant": user.tenant_id,
            "max_queued_orders": "6",
            "max_running_gpus": "",
            "trial_max_premium_gpus": "",
            "note": "asked by ticket 4711: a sweep of six runs",
        },
    )

    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert _post(api, "1× RTX 4090 24GB").json()["status"] == "queued"
    refused = _post(api, "1× RTX 4090 24GB")
    assert (refused.status_code, refused.json()["code"]) == (429, "queue_limit")
    assert "at most 6 orders" in refused.json()["detail"]
    listing = client.get("/admin/compute/tenantlimits/").content.decode()
    assert "16 (default)" in listing


def test_limits_are_checked_when_an_instance_starts(catalog, cluster, settings):
    settings.MAX_RUNNING_GPUS = 16  # two whole nodes
    user = make_user()
    stopped = make_instance(user, status="stopped")
    fund(user, 1_000_000)
    for _ in range(2):
        assert _order(user, "8× H100 80GB SXM bare metal").status == "provisioning"

    with pytest.raises(Conflict) as refused:
        instance_start(instance_id=stopped.id)

    assert refused.value.code == "gpu_limit"
    assert "you have 16 and this needs 1 more" in refused.value.message
    stopped.refresh_from_db()
    assert (stopped.status, holding_of(stopped).queued_at) == ("stopped", None)


def test_the_rent_form_shows_the_limit_and_how_to_lift_it(catalog, client, settings):
    settings.TRIAL_MAX_PREMIUM_GPUS = 0
    client.force_login(make_user())

    page = client.post(
        "/console/rent/",
        {
            "offering": _offering("1× A100 80GB SXM").id,
            "image": IMAGE,
            "billing": "hourly",
            "name": "try-a100",
            "token": "t" * 32,
        },
    )

    html = page.content.decode()
    assert page.status_code == 409
    assert "An account on trial credit may hold at most 0 GPUs of the premium models" in html
    assert "Top up your balance" in html
    assert Instance.objects.count() == 0


def test_concurrent_orders_never_pass_the_queued_orders_limit(transactional_db, cluster, settings):
    from django.core.management import call_command

    from fleet.services import nodes_sync_from_cluster
    from tests.conftest import run_threads

    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    owner = make_user()
    fund(owner, 100_000)
    assert _order(owner, "8× RTX 4090 24GB").status == "provisioning"
    # someone waits already, so no order below takes the GPU model's lock (placement's): only
    # the wallet lock keeps two of them from counting the same queue
    assert _order(owner, "1× RTX 4090 24GB").status == "queued"
    settings.MAX_QUEUED_ORDERS = 2
    user = make_user()
    fund(user, 100_000)
    offering = _offering("1× RTX 4090 24GB").id

    results = run_threads(
        6, lambda i: instance_order(user=user, offering_id=offering, image_id=IMAGE)[0].status
    )

    assert sorted(map(str, results)).count("queued") == 2, results
    refused = [r for r in results if isinstance(r, TooManyRequests)]
    assert len(refused) == 4, results
    assert {r.code for r in refused} == {"queue_limit"}
    assert Instance.objects.filter(tenant=user.tenant, status="queued").count() == 2
