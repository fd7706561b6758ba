"""Spending caps of API tokens (starverse.accounts.models.ApiToken: `max_spend_fen` over its
life, `max_spend_per_day_fen` in a calendar day, the platform's time zone): an order or a
start made through a capped token (starverse.core.acting) that would take the token's spend
past a cap is refused, 402 `token_cap`, by compute.admission.admit under the tenant's wallet
lock, so that two orders at once cannot both pass.

A token's spend is counted from the orders made through it while it had a cap (TokenOrder:
what each ordered, and its first hour, a month for a monthly rental): each order counts what
it has cost since (the usage the ledger charged for it, its cluster's ranks and its endpoint's
replicas included, and what the meter has accrued and not yet posted) or its first hour,
whichever is more. So an order is counted in full from the moment it is taken, before the meter
has charged a minute. The day's spend is the same, counting what was charged that day, and the
first hours of the orders made that day."""

from datetime import datetime

from django.db.models import F, Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from billing.choices import TransactionKind
from billing.models import LedgerTransaction
from compute.models import Holding, TokenOrder
from compute.orders import Order
from starverse.accounts.models import ApiToken
from starverse.core.acting import acting_token_id
from starverse.core.errors import InsufficientBalance
from starverse.core.money import format_fen


class TokenCapReached(InsufficientBalance):
    code = "token_cap"


def day_start(now: datetime | None = None) -> datetime:
    local = timezone.localtime(now or timezone.now())
    return local.replace(hour=0, minute=0, second=0, microsecond=0)


def token_spent_fen(token_id: str, *, since: datetime | None = None) -> int:
    """What the token's orders have spent (since `since`: that day's, else over its life), as
    the module says: per order, the more of its cost and its first hour."""
    rows = TokenOrder.objects.filter(token_id=token_id)
    reserved: dict[str, int] = {}
    for ordered_id, first_hour, created_at in rows.values_list(
        "ordered_id", "first_hour_fen", "created_at"
    ):
        counted = since is None or created_at >= since
        reserved[ordered_id] = reserved.get(ordered_id, 0) + (first_hour if counted else 0)
    if not reserved:
        return 0
    cost = _costs(list(reserved), since=since)
    return sum(max(cost.get(ordered_id, 0), hour) for ordered_id, hour in reserved.items())


def _costs(ordered_ids: list[str], *, since: datetime | None) -> dict[str, int]:
    """What each order cost (since `since`): the ledger's usage charged for it (an instance's
    id, a cluster's ranks', an endpoint's own) and its holdings' pending accruals."""
    holdings = Holding.objects.filter(
        Q(pk__in=ordered_ids) | Q(gang__in=ordered_ids) | Q(parent__in=ordered_ids)
    ).values_list("pk", "gang", "parent", F("pending_cash_fen") + F("pending_promo_fen"))
    owner: dict[str, str] = {ordered_id: ordered_id for ordered_id in ordered_ids}
    cost: dict[str, int] = {}
    for pk, gang, parent, pending in holdings:
        whose = pk if pk in owner else (gang if gang in owner else parent)
        owner[pk] = whose
        cost[whose] = cost.get(whose, 0) + int(pending or 0)
    charges = LedgerTransaction.objects.filter(
        instance_id__in=list(owner), kind__in=(TransactionKind.USAGE, TransactionKind.REVERSAL)
    )
    if since is not None:
        charges = charges.filter(created_at__gte=since)
    for instance_id, total in (
        charges.values("instance_id")
        .annotate(total=Sum("amount_fen"))
        .values_list("instance_id", "total")
    ):
        whose = owner[instance_id]
        cost[whose] = cost.get(whose, 0) - int(total or 0)
    return cost


def token_cap_check(order: Order, need_fen: int) -> None:
    """Under the tenant's wallet lock (compute.admission.admit): refuse (402 `token_cap`) an
    order of the request's token (none: nothing to check) that would take its spend past one
    of its caps, counting `need_fen` (the order's first hour, or month); else record it."""
    token_id = acting_token_id()
    if not token_id:
        return
    caps = (
        ApiToken.objects.filter(pk=token_id)
        .values_list("max_spend_fen", "max_spend_per_day_fen")
        .first()
    )
    if caps is None or caps == (None, None):
        return
    life_cap, day_cap = caps
    if day_cap is not None:
        _cap_check(day_cap, token_spent_fen(token_id, since=day_start()), need_fen, per_day=True)
    if life_cap is not None:
        _cap_check(life_cap, token_spent_fen(token_id), need_fen, per_day=False)
    TokenOrder.objects.create(
        token_id=token_id, ordered_id=order.gang or order.pk or "", first_hour_fen=need_fen
    )


def _cap_check(cap: int, spent: int, need: int, *, per_day: bool) -> None:
    if spent + need <= cap:
        return
    amounts = {"cap": format_fen(cap), "spent": format_fen(spent), "need": format_fen(need)}
    if per_day:
        message = _(
            "This API token may spend at most %(cap)s a day; its orders have spent %(spent)s "
            "today and this one needs %(need)s for its first hour. Wait for tomorrow, or make a "
            "token with a higher cap (Account → API tokens, or POST /api/v1/tokens with "
            "max_spend_per_day_fen)."
        )
    else:
        message = _(
            "This API token may spend at most %(cap)s; its orders have spent %(spent)s and this "
            "one needs %(need)s for its first hour. Make a token with a higher cap (Account → "
            "API tokens, or POST /api/v1/tokens with max_spend_fen)."
        )
    raise TokenCapReached(message % amounts)
