"""What an instance costs its tenant, posted to the ledger: the minutes it runs (hourly billing)
and the 30-day periods it prepays (monthly billing). Usage minute m of a session is charged once,
under usage:{instance}:{session}:{minute}, from trial credit at the offering's trial price while
the trial credit covers the minute, else from cash at its price; period n once, under
monthly:{instance}:{n}, from cash only. The
state machine (instances.states) closes a session when an instance leaves running; the tick
(instances.metering) and the renewals (instances.monthly) call these too."""

from datetime import datetime, timedelta
from typing import Any

from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_noop

from billing.choices import TransactionKind
from billing.services import ledger_post, minute_charge_fen, usage_post_many
from compute.choices import BillingMode
from instances.models import Instance, InstanceEvent
from starverse.core.text import later

PERIOD = timedelta(days=30)


def closed_minutes(instance: Instance, now: datetime) -> int:
    if instance.running_since is None:
        return 0
    return max(0, int((now - instance.running_since).total_seconds() // 60))


def usage_charges(instance: Instance, upto: int) -> list[dict]:
    """The usage charge of each unbilled minute up to `upto`, keyed per (instance, minute)."""
    return minute_charges(
        instance_id=instance.id,
        session=instance.session,
        wallet_id=instance.tenant.wallet.id,
        price_per_hour_fen=instance.offering.price_per_hour_fen,
        trial_price_per_hour_fen=instance.offering.trial_price_per_hour_fen,
        billed=instance.billed_minutes,
        upto=upto,
    )


def minute_charges(
    *,
    instance_id: str,
    session: int,
    wallet_id: str,
    price_per_hour_fen: int,
    trial_price_per_hour_fen: int | None,
    billed: int,
    upto: int,
) -> list[dict]:
    """usage_charges from plain values: the metering tick reads its instances as rows. Each
    minute carries its price at the offering's trial price too, when it has one."""
    charges = []
    trial = trial_price_per_hour_fen
    for minute in range(billed + 1, upto + 1):
        amount = minute_charge_fen(price_per_hour_fen, minute)
        if amount > 0:
            charges.append(
                {
                    "wallet_id": wallet_id,
                    "key": f"usage:{instance_id}:{session}:{minute}",
                    "amount_fen": amount,
                    "trial_amount_fen": None if trial is None else minute_charge_fen(trial, minute),
                    "instance_id": instance_id,
                    "description": gettext_noop("GPU usage"),
                }
            )
    return charges


def bill_until(instance: Instance, now: datetime, *, started_minute: bool) -> int:
    """Charge the instance's unbilled minutes up to `now` (with the minute in progress when
    `started_minute`), inside the caller's transaction that holds its row lock."""
    if instance.running_since is None or instance.billing != BillingMode.HOURLY:
        return 0
    elapsed = (now - instance.running_since).total_seconds()
    upto = int(-(-elapsed // 60)) if started_minute else int(elapsed // 60)
    charges = usage_charges(instance, upto)
    keys = [c["key"] for c in charges]
    if upto <= instance.billed_minutes:
        return 0
    charged = usage_post_many(charges)
    spent = sum(charged[key].fen for key in keys)
    Instance.objects.filter(pk=instance.pk).update(
        billed_minutes=upto, cost_fen=F("cost_fen") + spent
    )
    return spent


def period_active(instance: Instance) -> bool:
    """A monthly rental whose prepaid period runs: its node stays reserved, even stopped."""
    return (
        instance.billing == BillingMode.MONTHLY
        and instance.paid_until is not None
        and instance.paid_until > timezone.now()
    )


def period_charge(instance: Instance, *, now: Any = None) -> None:
    """Prepay the next period from cash (raises InsufficientBalance): trial credit pays
    minutes at trial prices only. Call with the row locked."""
    now = now or timezone.now()
    period = instance.monthly_period + 1
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
    start = max(instance.paid_until or now, now)
    instance.monthly_period, instance.paid_until = period, start + PERIOD
    instance.cost_fen += -txn.amount_fen
    Instance.objects.filter(pk=instance.pk).update(
        monthly_period=period, paid_until=instance.paid_until, cost_fen=instance.cost_fen
    )
    InstanceEvent.objects.create(
        instance=instance,
        status=instance.status,
        message=later("Monthly period %(n)d paid until %(until)s.")
        % {"n": period, "until": timezone.localtime(instance.paid_until).strftime("%Y-%m-%d")},
    )
