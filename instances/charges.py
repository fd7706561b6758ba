"""What an instance costs its tenant, posted to the ledger: the minutes it runs (hourly billing)
and the 30-day periods it prepays (monthly billing). Minutes are the compute core's meter's
(compute.metering): a session opens when the instance starts running and closes when it leaves
running (instances.states calls these), its minutes posted by the hour under
usage:{instance}:{session}:{first}-{last}. Period n is posted once, under
monthly:{instance}:{n}, from cash only (instances.monthly calls period_charge)."""

from datetime import datetime, timedelta
from typing import Any

from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_noop

from billing.choices import TransactionKind
from billing.services import ledger_post
from compute.choices import BillingMode
from compute.metering import meter_close, meters_open
from instances.models import Instance, InstanceEvent, MonthlyRental
from starverse.core.text import later

PERIOD = timedelta(days=30)
# The billing modes metered by the minute (a monthly rental prepays its periods).
BY_THE_MINUTE = (BillingMode.HOURLY, BillingMode.SPOT)


def bill_until(instance: Instance, now: datetime, *, started_minute: bool) -> int:
    """End the instance's metering session at `now` (with the minute in progress when
    `started_minute`): its unposted minutes are accrued and posted (compute.metering), inside
    the caller's transaction that holds its row lock. Returns the fen charged now."""
    if instance.running_since is None or instance.billing not in BY_THE_MINUTE:
        return 0
    spent = meter_close(instance.id, now=now, started_minute=started_minute)
    if spent:
        Instance.objects.filter(pk=instance.pk).update(cost_fen=F("cost_fen") + spent)
    return spent


def meter_start(instance: Instance, now: datetime) -> None:
    """The instance serves from `now` in a new session (its `session` already counted): an
    hourly or spot one is metered from now (a spot one at its offering's spot price), its
    postings keyed usage:{instance}:{session}."""
    meters_start([instance], now)


def meters_start(instances: list[Instance], now: datetime) -> None:
    """meter_start for several instances at once (a cluster's ranks, billed from the same
    moment): one query opens all their sessions (compute.metering.meters_open)."""
    meters_open(
        {
            instance.id: f"usage:{instance.id}:{instance.session}"
            for instance in instances
            if instance.billing in BY_THE_MINUTE
        },
        since=now,
    )


def period_active(instance: Instance) -> bool:
    """A monthly rental whose prepaid period runs: its node stays reserved, even stopped."""
    rental = instance.rental
    return (
        instance.billing == BillingMode.MONTHLY
        and rental is not None
        and rental.paid_until is not None
        and rental.paid_until > timezone.now()
    )


def period_charge(instance: Instance, *, now: Any = None) -> None:
    """Prepay the next period from cash (raises InsufficientBalance): trial credit pays
    minutes at trial prices only. Call with the row locked. The instance's rental records the
    period (made here for one that has none, as a rank that scaling up added has)."""
    now = now or timezone.now()
    rental = instance.rental or MonthlyRental(instance=instance)
    period = rental.monthly_period + 1
    price = instance.offering.price_per_month_fen
    if price is None:
        # an order needs one (lifecycle._orderable): only an offering edited since lacks it
        raise ValueError(f"offering {instance.offering_id} has no monthly price")
    txn = ledger_post(
        wallet_id=instance.tenant.wallet.id,
        key=f"monthly:{instance.id}:{period}",
        kind=TransactionKind.USAGE,
        amount_fen=-price,
        instance_id=instance.id,
        description=gettext_noop("Monthly rental"),
    )
    start = max(rental.paid_until or now, now)
    rental.monthly_period, rental.paid_until = period, start + PERIOD
    rental.save()
    instance.cost_fen += -txn.amount_fen
    Instance.objects.filter(pk=instance.pk).update(cost_fen=instance.cost_fen)
    InstanceEvent.objects.create(
        instance=instance,
        status=instance.status,
        message=later("Monthly period %(n)d paid until %(until)s.")
        % {"n": period, "until": timezone.localtime(rental.paid_until).strftime("%Y-%m-%d")},
    )
