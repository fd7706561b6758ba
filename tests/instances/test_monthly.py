from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone, translation

from billing.models import LedgerTransaction, Wallet
from billing.onboarding import team_create
from compute.models import Allocation
from instances.lifecycle import instance_order, instance_start, instance_stop
from instances.metering import metering_tick
from instances.models import Instance, MonthlyRental
from instances.monthly import renewals_run
from instances.provisioning import converge
from instances.selectors import availability
from starverse.accounts.models import Budget
from starverse.core.errors import InsufficientBalance
from tests.factories import converge_until, fund, holding_of, make_user
from tests.teams.test_teams import fund_team, join

MONTH = 12_800_000  # the 8×H100 node: ¥128,000 a month


def _monthly(catalog, user, **extra):
    instance, _ = instance_order(
        user=user,
        offering_id=catalog["h100_node"].id,
        image_id="pytorch-2.1",
        billing="monthly",
        **extra,
    )
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    return instance


def _monthly_rows(instance):
    return list(
        LedgerTransaction.objects.filter(instance_id=instance.id).values_list(
            "idempotency_key", "amount_fen"
        )
    )


def test_a_month_is_prepaid_once_and_not_metered(catalog):
    user = make_user()
    fund(user, MONTH)
    instance = _monthly(catalog, user)

    metering_tick(now=timezone.now() + timedelta(hours=2))

    assert _monthly_rows(instance) == [(f"monthly:{instance.id}:1", -MONTH)]
    assert instance.monthly.paid_until - timezone.now() > timedelta(days=29, hours=23)
    assert instance.cost_fen == MONTH
    assert Wallet.objects.get(tenant=user.tenant).total_fen == 1000  # the trial credit is left


def test_without_a_month_on_the_balance_nothing_is_ordered(catalog):
    user = make_user()
    fund(user, MONTH - 2000)

    with pytest.raises(InsufficientBalance, match="one month"):
        instance_order(
            user=user,
            offering_id=catalog["h100_node"].id,
            image_id="pytorch-2.1",
            billing="monthly",
        )
    assert Instance.objects.count() == 0


def test_the_node_stays_reserved_while_stopped_and_start_returns_to_it(catalog):
    user = make_user()
    fund(user, MONTH)
    instance = _monthly(catalog, user)
    node = instance.node

    instance_stop(instance_id=instance.id)
    assert converge_until(converge.stop, instance.id) == "stopped"

    assert Allocation.objects.filter(holding__instance=instance).count() == 8
    assert availability([catalog["h100_node"]])[catalog["h100_node"].id] == 1  # of two nodes
    instance_start(instance_id=instance.id)
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    assert instance.node == node
    assert len(_monthly_rows(instance)) == 1  # no second charge inside the period


def test_renewal_charges_the_next_period_or_ends_the_rental(catalog):
    user, other = make_user(), make_user()
    fund(user, 2 * MONTH)
    fund(other, MONTH)
    renews = _monthly(catalog, user)
    short = _monthly(catalog, other)  # cannot pay a second month
    later = timezone.now() + timedelta(days=30, minutes=1)

    renewed, ended = renewals_run(now=later)

    assert (renewed, ended) == ([renews.id], [short.id])
    assert [key for key, _ in _monthly_rows(renews)] == [
        f"monthly:{renews.id}:1",
        f"monthly:{renews.id}:2",
    ]
    short.refresh_from_db()
    assert (short.status, short.billing) == ("stopping", "hourly")
    assert "balance could not pay" in short.events.last().text
    assert renewals_run(now=later) == ([], [])  # nothing twice


def test_not_renewing_when_the_user_chose_so_frees_a_stopped_node(catalog):
    user = make_user()
    fund(user, 2 * MONTH)
    instance = _monthly(catalog, user, auto_renew=False)
    instance_stop(instance_id=instance.id)
    converge_until(converge.stop, instance.id)

    _renewed, ended = renewals_run(now=timezone.now() + timedelta(days=31))

    assert ended == [instance.id]
    assert Allocation.objects.filter(holding__instance=instance).count() == 0
    assert len(_monthly_rows(instance)) == 1


def test_a_queued_monthly_rental_that_cannot_pay_its_month_is_passed_over_then_fails_free(
    catalog, settings
):
    from instances.lifecycle import instance_terminate, queue_drain

    settings.MAX_RUNNING_GPUS = 24  # three whole nodes, the third queued
    user = make_user()
    fund(user, 3 * MONTH)
    first, _second = _monthly(catalog, user), _monthly(catalog, user)  # both H100 nodes
    waiting, _ = instance_order(
        user=user, offering_id=catalog["h100_node"].id, image_id="pytorch-2.1", billing="monthly"
    )
    assert waiting.status == "queued"
    Wallet.objects.filter(tenant=user.tenant).update(cash_fen=0, promo_fen=0)  # audit-breaking
    instance_terminate(instance_id=first.id)
    converge_until(converge.terminate, first.id)
    now = timezone.now()

    assert queue_drain(product="NVIDIA H100 80GB HBM3", now=now) == []
    waiting.refresh_from_db()
    assert (waiting.status, holding_of(waiting).unfunded_since) == ("queued", now)
    assert "one month of this order" in [event.text for event in waiting.events.all()][-1]

    later = now + timedelta(minutes=settings.QUEUE_UNFUNDED_GRACE_MINUTES)
    assert queue_drain(product="NVIDIA H100 80GB HBM3", now=later) == []

    waiting.refresh_from_db()
    assert (waiting.status, holding_of(waiting).queued_at, waiting.node_id) == (
        "failed",
        None,
        None,
    )
    assert waiting.error_message == (
        "Your cash balance of ¥0.00 did not cover ¥128,000.00, one month of this order "
        "(¥128,000.00) plus one hour of your running instances (¥0.00), while this order "
        "waited; nothing was charged. Top up and order again."
    )
    assert Allocation.objects.filter(holding__instance=waiting).count() == 0
    assert _monthly_rows(waiting) == []
    assert queue_drain(product="NVIDIA H100 80GB HBM3", now=later) == []  # not stuck on it


def _team_rental(catalog, *, member_budget=None, team_budget=None):
    """A member's monthly rental in a team with these monthly budgets, whose paid month ends
    now (as if rented 30 days ago) in the calendar month of its first charge."""
    owner, member = make_user(), make_user()
    team = team_create(user=owner, name="NLP lab")
    join(team, owner, member)
    fund_team(team, 3 * MONTH)
    for user, fen in ((member, member_budget), (None, team_budget)):
        if fen is not None:
            Budget.objects.create(tenant=team, user=user, monthly_fen=fen)
    member.act_for(team.pk, "member")
    instance = _monthly(catalog, member)
    MonthlyRental.objects.filter(instance=instance).update(
        paid_until=timezone.now() - timedelta(seconds=1)
    )
    instance.refresh_from_db()
    return owner, member, instance


def test_a_renewal_its_orderers_budget_does_not_fit_ends_the_rental_and_tells_the_owners(
    catalog, django_capture_on_commit_callbacks
):
    """¥128,000 of a ¥128,000 budget is spent this month: the next month is not charged (the
    member's spend would reach twice the budget); the rental ends at its paid month, the
    timeline says why, and the team's owners are mailed."""
    owner, member, instance = _team_rental(catalog, member_budget=MONTH)
    paid_until = instance.monthly.paid_until

    with django_capture_on_commit_callbacks(execute=True):
        renewed, ended = renewals_run()

    assert (renewed, ended) == ([], [instance.id])
    # the stop's task may give up while the emulated pod is still going: the reconcile's pass
    assert converge_until(converge.stop, instance.id) == "stopped"
    instance.refresh_from_db()
    assert (instance.status, instance.billing, instance.monthly.monthly_period) == (
        "stopped",
        "hourly",
        1,
    )
    assert instance.monthly.paid_until == paid_until
    assert Allocation.objects.filter(holding__instance=instance).count() == 0
    assert _monthly_rows(instance) == [(f"monthly:{instance.id}:1", -MONTH)]
    why = (
        "Monthly rental not renewed: the monthly budget of whoever rented it in team NLP lab is "
        "¥128,000.00 and ¥128,000.00 is spent this month; the next month costs ¥128,000.00. "
        "The instance is stopped and its disk kept; starting it again is billed by the minute. "
        "An owner can raise the budget."
    )
    line = instance.events.exclude(message__startswith="Kubernetes: ").get(status="stopping")
    assert line.text == why
    [message] = mail.outbox
    assert sorted(message.to) == sorted([owner.email, member.email])
    assert why in message.body
    with translation.override("zh-hans"):
        assert line.text in message.body
        assert line.text != why
    assert renewals_run() == ([], [])


def test_a_renewal_the_budgets_fit_is_charged(catalog, django_capture_on_commit_callbacks):
    _owner, _member, instance = _team_rental(
        catalog, member_budget=2 * MONTH, team_budget=2 * MONTH
    )

    with django_capture_on_commit_callbacks(execute=True):
        renewed, ended = renewals_run()

    assert (renewed, ended) == ([instance.id], [])
    assert [key for key, _ in _monthly_rows(instance)] == [
        f"monthly:{instance.id}:1",
        f"monthly:{instance.id}:2",
    ]
    assert Instance.objects.get(pk=instance.pk).status == "running"
    assert mail.outbox == []


def test_a_renewal_the_teams_budget_does_not_fit_ends_the_rental(
    catalog, django_capture_on_commit_callbacks
):
    owner, member, instance = _team_rental(catalog, team_budget=MONTH + 100)

    with django_capture_on_commit_callbacks(execute=True):
        renewed, ended = renewals_run()

    assert (renewed, ended) == ([], [instance.id])
    assert _monthly_rows(instance) == [(f"monthly:{instance.id}:1", -MONTH)]
    assert (
        instance.events.exclude(message__startswith="Kubernetes: ")
        .get(status="stopping")
        .text.startswith(
            "Monthly rental not renewed: the monthly budget of team NLP lab is ¥128,001.00 and "
            "¥128,000.00 is spent this month; the next month costs ¥128,000.00."
        )
    )
    [message] = mail.outbox
    assert sorted(message.to) == sorted([owner.email, member.email])
