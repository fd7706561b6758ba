"""What an hour of a holding costs: by mode (its GPUs attached, or no-GPU mode), then by
billing. One table (HOUR_PRICES), read three ways from it: per-minute metering (an ORM
expression over holdings, compute.metering), the spend rate (an SQL expression,
instances.selectors.spend_rows) and an order's runway (Python, compute.orders.Order.own_fen).

- no-GPU mode: the offering's no-GPU price, whatever the billing, which trial credit pays too at
  the same price (an operator who withdrew the no-GPU price leaves running sessions at the
  standard ones);
- spot: the offering's spot price (its hourly price if the operator withdrew the spot price
  while it ran), in cash only: trial credit pays the standard hourly minutes;
- hourly, and monthly by the hour (a monthly rental is prepaid a month at price_per_month_fen;
  it is never metered while its month runs): the hourly price, or trial credit's."""

from dataclasses import dataclass

from django.db.models import BigIntegerField, Case, F, Q, Value, When
from django.db.models.expressions import Combinable
from django.db.models.functions import Coalesce

from compute.choices import BillingMode
from compute.models import Offering


@dataclass(frozen=True)
class HourPrice:
    """The offering's columns that price an hour, the first one set winning, in cash and in
    trial credit (`trial` empty: trial credit does not pay it)."""

    cash: tuple[str, ...]
    trial: tuple[str, ...]


_STANDARD = HourPrice(("price_per_hour_fen",), ("trial_price_per_hour_fen",))
_NO_GPU = HourPrice(
    ("cpu_only_price_per_hour_fen", "price_per_hour_fen"),
    ("cpu_only_price_per_hour_fen", "trial_price_per_hour_fen"),
)
# (GPUs attached, billing) -> its hour's price
HOUR_PRICES: dict[tuple[bool, str], HourPrice] = {
    (True, BillingMode.HOURLY): _STANDARD,
    (True, BillingMode.MONTHLY): _STANDARD,
    (True, BillingMode.SPOT): HourPrice(("spot_price_per_hour_fen", "price_per_hour_fen"), ()),
    **{(False, billing): _NO_GPU for billing in BillingMode.values},
}


def _columns(gpus_attached: bool, billing: str, *, trial: bool) -> tuple[str, ...]:
    price = HOUR_PRICES[(gpus_attached, billing)]
    return price.trial if trial else price.cash


def hour_price(
    offering: Offering, *, billing: str, gpus_attached: bool = True, trial: bool = False
) -> int | None:
    """An hour of a holding of `offering` (in cash, or with `trial` in trial credit); None:
    not priced so."""
    for column in _columns(gpus_attached, billing, trial=trial):
        value = getattr(offering, column)
        if value is not None:
            return int(value)
    return None


def _first_set(columns: tuple[str, ...], prefix: str) -> Combinable:
    if not columns:
        return Value(None, output_field=BigIntegerField())
    if len(columns) == 1:
        return F(prefix + columns[0])
    return Coalesce(*(prefix + column for column in columns), output_field=BigIntegerField())


def hour_price_expression(*, trial: bool = False) -> Case:
    """hour_price as an expression over a Holding (its gpus_attached, billing, offering)."""
    return Case(
        *(
            When(
                Q(gpus_attached=attached, billing=billing),
                then=_first_set(price.trial if trial else price.cash, "offering__"),
            )
            for (attached, billing), price in HOUR_PRICES.items()
        ),
        default=Value(None, output_field=BigIntegerField()),
        output_field=BigIntegerField(),
    )


def hour_price_sql(*, offering: str, billing: str, gpus_attached: str, trial: bool = False) -> str:
    """hour_price as an SQL expression, given the SQL of the offering's table alias and of the
    holding's billing and gpus_attached (the values in the table are the code's own)."""
    whens = []
    for (attached, mode), price in HOUR_PRICES.items():
        columns = [f"{offering}.{column}" for column in (price.trial if trial else price.cash)]
        value = "NULL" if not columns else columns[0]
        if len(columns) > 1:
            value = f"COALESCE({', '.join(columns)})"
        test = gpus_attached if attached else f"NOT {gpus_attached}"
        whens.append(f"WHEN {test} AND {billing} = '{BillingMode(mode).value}' THEN {value}")
    return f"(CASE {' '.join(whens)} END)"
