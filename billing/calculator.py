"""Total cost of one training job: buying the cluster, renting from a traditional cloud, or
renting on Starverse. Exact rational arithmetic; each amount is rounded half-up to whole fen
once, at the end of its own formula. A month is 365/12 days.

The Starverse side is never a number typed in: it is an offering of the catalog (CatalogPrice,
read by instances.selectors.calculator_offering), so the calculator and Rent always agree."""

from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from math import ceil
from typing import Any, NotRequired, TypedDict

from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from starverse.core.money import format_fen

HOURS_PER_YEAR = 8760
DAYS_PER_MONTH = Fraction(365, 12)
HOURS_PER_MONTH = 24 * DAYS_PER_MONTH  # 730


# A figure of a job: a Decimal once validated (billing.api.serializers.TcoInput), an int in a
# preset.
Figure = int | Decimal


class TcoBuy(TypedDict):
    gpu_unit_fen: int
    other_capex_fen: int
    opex_fen: int
    years: int
    power_kw: Figure
    pue: NotRequired[Figure]  # the data centre's power usage effectiveness; 1 when omitted
    electricity_fen_per_kwh: Figure


class TcoCloud(TypedDict):
    gpus_per_node: int
    node_month_fen: int
    egress_gb: Figure
    egress_fen_per_gb: Figure


class TcoStarverse(TypedDict):
    offering: str  # a slug or id of the catalog


class TcoJob(TypedDict):
    """A job to cost, as TcoInput validates it or a preset gives it."""

    gpus: int
    duration_days: Figure
    buy: TcoBuy
    cloud: TcoCloud
    starverse: TcoStarverse


class TcoPreset(TypedDict):
    key: str
    name: Promise  # short, on its button; in the reader's language
    title: Promise  # what it is, with the figures' sources
    input: TcoJob


@dataclass(frozen=True)
class CatalogPrice:
    """An offering of the catalog as the calculator prices it: its GPUs per unit rented and its
    monthly price (包月) if it has one, else its hourly price."""

    id: str
    slug: str | None
    name: str
    gpus: int
    price_per_hour_fen: int
    price_per_month_fen: int | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "slug": self.slug,
            "name": self.name,
            "gpu_count": self.gpus,
            "price_per_hour_fen": self.price_per_hour_fen,
            "price_per_month_fen": self.price_per_month_fen,
        }


def round_half_up(value: Fraction) -> int:
    """Round to the nearest integer, halves away from zero."""
    sign = -1 if value < 0 else 1
    magnitude = abs(value)
    whole = magnitude.numerator // magnitude.denominator
    if magnitude - whole >= Fraction(1, 2):
        whole += 1
    return sign * whole


class Line(TypedDict):
    """One line of an option's working: what, how it was reckoned, and the amount."""

    label: str
    formula: str
    amount_fen: int


@dataclass
class Option:
    per_month_fen: int = 0
    job_fen: int = 0
    lifetime_fen: int | None = None
    lines: list[Line] = field(default_factory=list)

    def line(self, label: str, formula: str, amount: Fraction) -> int:
        fen = round_half_up(amount)
        self.lines.append({"label": label, "formula": formula, "amount_fen": fen})
        return fen

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "per_month_fen": self.per_month_fen,
            "job_fen": self.job_fen,
            "lines": self.lines,
        }
        if self.lifetime_fen is not None:
            data["lifetime_fen"] = self.lifetime_fen
        return data


def _f(value: Figure) -> Fraction:
    return Fraction(str(value))


def _num(value: Figure) -> str:
    """An input as people write it: 42, 1.2, 8,000 — no trailing zeros."""
    fraction = _f(value)
    if fraction.denominator == 1:
        return f"{fraction.numerator:,}"
    return f"{float(fraction):,.6f}".rstrip("0").rstrip(".")


def _yuan(fen: Figure) -> str:
    return format_fen(round_half_up(_f(fen)))


@dataclass(frozen=True)
class _Job:
    """What every option is costed for: `gpus` GPUs over `months` (days ÷ 365/12)."""

    gpus: int
    months: Fraction
    span: dict[str, str]  # the days and months as the formulas print them


def tco_compare(data: TcoJob, offering: CatalogPrice) -> dict[str, Any]:
    """`data` is validated input (see billing.api.serializers.TcoInput); `offering` is the
    catalog offering its `starverse.offering` names."""
    months = _f(data["duration_days"]) / DAYS_PER_MONTH
    job = _Job(
        gpus=int(data["gpus"]),
        months=months,
        span={"days": _num(data["duration_days"]), "months": f"{float(months):.4f}"},
    )
    return {
        "months": f"{float(months):.6f}",
        "buy": _buying(data["buy"], job).as_dict(),
        "cloud": _cloud_rental(data["cloud"], job).as_dict(),
        "starverse": {
            **_starverse_rental(offering, job).as_dict(),
            "offering": offering.as_dict(),
        },
    }


def _buying(buy_in: TcoBuy, job: _Job) -> Option:
    """The lifetime cost of owning the GPUs, spread evenly over the months of their lifetime."""
    buy, gpus = Option(), job.gpus
    years = int(buy_in["years"])
    gpu_cost = gpus * _f(buy_in["gpu_unit_fen"])
    pue = buy_in.get("pue", 1)
    power = (
        _f(buy_in["power_kw"])
        * _f(pue)
        * _f(buy_in["electricity_fen_per_kwh"])
        * HOURS_PER_YEAR
        * years
    )
    lifetime = gpu_cost + _f(buy_in["other_capex_fen"]) + _f(buy_in["opex_fen"]) + power
    buy.line(
        _("GPUs"),
        ngettext("%(n)s GPU × %(price)s", "%(n)s GPUs × %(price)s", gpus)
        % {"n": _num(gpus), "price": _yuan(buy_in["gpu_unit_fen"])},
        gpu_cost,
    )
    buy.line(
        _("Other capital expenditure"),
        _("servers, network, storage, facility"),
        _f(buy_in["other_capex_fen"]),
    )
    buy.line(
        _("Operating expenditure"),
        _("staff, maintenance, space over the lifetime"),
        _f(buy_in["opex_fen"]),
    )
    buy.line(
        _("Electricity"),
        ngettext(
            "%(kw)s kW × PUE %(pue)s × %(price)s per kWh × 8,760 h × %(years)s year",
            "%(kw)s kW × PUE %(pue)s × %(price)s per kWh × 8,760 h × %(years)s years",
            years,
        )
        % {
            "kw": _num(buy_in["power_kw"]),
            "pue": _num(pue),
            "price": _yuan(buy_in["electricity_fen_per_kwh"]),
            "years": years,
        },
        power,
    )
    buy.lifetime_fen = buy.line(_("Lifetime cost"), _("sum of the lines above"), lifetime)
    per_month = lifetime / (12 * years)
    buy.per_month_fen = buy.line(
        _("Per month"), _("lifetime ÷ (12 × %(years)s)") % {"years": years}, per_month
    )
    buy.job_fen = buy.line(
        _("This job"),
        _("per month × %(days)s days ÷ (365/12) = %(months)s months") % job.span,
        per_month * job.months,
    )
    return buy


def _cloud_rental(cloud_in: TcoCloud, job: _Job) -> Option:
    """Whole nodes by the month from a traditional cloud, plus its fee for data leaving it."""
    cloud = Option()
    nodes = ceil(job.gpus / int(cloud_in["gpus_per_node"]))
    cloud_month = nodes * _f(cloud_in["node_month_fen"])
    egress = _f(cloud_in["egress_gb"]) * _f(cloud_in["egress_fen_per_gb"])
    cloud.per_month_fen = cloud.line(_("Per month"), _node_months(nodes, cloud_in), cloud_month)
    cloud.line(
        _("Compute for this job"),
        _("per month × %(days)s days ÷ (365/12) = %(months)s months") % job.span,
        cloud_month * job.months,
    )
    cloud.line(
        _("Data egress"),
        _("%(gb)s GB × %(price)s per GB")
        % {"gb": _num(cloud_in["egress_gb"]), "price": _yuan(cloud_in["egress_fen_per_gb"])},
        egress,
    )
    cloud.job_fen = cloud.line(
        _("This job"), _("compute + egress"), cloud_month * job.months + egress
    )
    return cloud


def _starverse_rental(offering: CatalogPrice, job: _Job) -> Option:
    """The offering on Starverse at its catalog price, by the month when it has a monthly
    price and otherwise by the hour around the clock; Starverse charges nothing for egress."""
    starverse = Option()
    units = ceil(job.gpus / offering.gpus)
    if offering.price_per_month_fen is not None:
        unit_month = _f(offering.price_per_month_fen)
        formula = _("%(n)s × %(offering)s (⌈GPUs ÷ %(per)s⌉) × %(price)s per month") % {
            "n": _num(units),
            "offering": offering.name,
            "per": offering.gpus,
            "price": _yuan(offering.price_per_month_fen),
        }
    else:
        unit_month = offering.price_per_hour_fen * HOURS_PER_MONTH
        formula = _("%(n)s × %(offering)s (⌈GPUs ÷ %(per)s⌉) × %(price)s per hour × 730 h") % {
            "n": _num(units),
            "offering": offering.name,
            "per": offering.gpus,
            "price": _yuan(offering.price_per_hour_fen),
        }
    sv_month = units * unit_month
    starverse.per_month_fen = starverse.line(_("Per month"), formula, sv_month)
    starverse.job_fen = starverse.line(
        _("This job"),
        _("per month × %(days)s days ÷ (365/12) = %(months)s months; no egress fees") % job.span,
        sv_month * job.months,
    )
    return starverse


def _node_months(nodes: int, side: TcoCloud) -> str:
    return ngettext(
        "%(nodes)s node (⌈GPUs ÷ %(per)s⌉) × %(price)s per node-month",
        "%(nodes)s nodes (⌈GPUs ÷ %(per)s⌉) × %(price)s per node-month",
        nodes,
    ) % {"nodes": _num(nodes), "per": side["gpus_per_node"], "price": _yuan(side["node_month_fen"])}


# Presets the console page opens with; every figure is derived from these inputs. Power: an
# 8×H100 node draws up to 10.2 kW at the wall (NVIDIA DGX H100 system specification, "System
# power usage: ~10.2 kW max"), in a data centre of PUE 1.3, at ¥0.80 per kWh (China's
# industrial electricity price, about ¥0.6–1.0).
NODE_KW = Decimal("10.2")
PUE = Decimal("1.3")
ELECTRICITY_FEN_PER_KWH = 80

PRESETS: list[TcoPreset] = [
    {
        "key": "cluster_1024",
        "name": gettext_lazy("1,024-GPU cluster, 42 days"),
        "title": gettext_lazy(
            "1,024-GPU training cluster, 42-day run: 128 8×H100 nodes at 10.2 kW each "
            "(NVIDIA DGX H100 maximum), PUE 1.3, ¥0.80/kWh"
        ),
        "input": {
            "gpus": 1024,
            "duration_days": 42,
            "buy": {
                "gpu_unit_fen": 28_000_000,
                "other_capex_fen": 8_500_000_000,
                "opex_fen": 3_800_000_000,
                "years": 5,
                "power_kw": NODE_KW * 128,
                "pue": PUE,
                "electricity_fen_per_kwh": ELECTRICITY_FEN_PER_KWH,
            },
            "cloud": {
                "gpus_per_node": 8,
                "node_month_fen": 26_000_000,
                "egress_gb": 8000,
                "egress_fen_per_gb": 80,
            },
            # the catalog's offering, at its price (Rent's): never a figure of its own
            "starverse": {"offering": "h100-80g-bare-metal"},
        },
    },
    {
        "key": "node_8xh100",
        "name": gettext_lazy("One 8×H100 node, 1 year"),
        "title": gettext_lazy(
            "One 8×H100 node for a year: bought for ¥2,600,000 over 3 years at 10.2 kW "
            "(NVIDIA DGX H100 maximum), or rented by the month"
        ),
        "input": {
            "gpus": 8,
            "duration_days": 365,
            # ¥2,600,000 for the node = 8 × ¥325,000
            "buy": {
                "gpu_unit_fen": 32_500_000,
                "other_capex_fen": 0,
                "opex_fen": 0,
                "years": 3,
                "power_kw": NODE_KW,
                "pue": PUE,
                "electricity_fen_per_kwh": ELECTRICITY_FEN_PER_KWH,
            },
            "cloud": {
                "gpus_per_node": 8,
                "node_month_fen": 26_000_000,
                "egress_gb": 0,
                "egress_fen_per_gb": 0,
            },
            "starverse": {"offering": "h100-80g-bare-metal"},
        },
    },
]


def presets_shown() -> list[dict[str, Any]]:
    """The presets as the page carries them (JSON): names in the reader's language, decimals
    as the exact strings the API takes."""
    return [
        {
            "key": preset["key"],
            "name": str(preset["name"]),
            "title": str(preset["title"]),
            "input": _plain(preset["input"]),
        }
        for preset in PRESETS
    ]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, Decimal):
        return str(value)
    return value
