"""What endpoints hear of the compute core's meter (compute.metering), which meters their
replicas by the minute: the fen accrued, added to each endpoint's cost; an endpoint whose
balance could not pay a replica's minute is scaled to zero (never deleted); and after a tick
that charged endpoints, the monthly budgets of their creators and teams are checked."""

from compute.choices import HoldingKind
from compute.metering import MeterHooks, meter_hooks_register
from endpoints.models import Endpoint
from endpoints.services import endpoint_suspend, endpoints_over_budget_suspend
from starverse.core.db import bulk_set


def _costs_add(accrued: dict[str, int]) -> None:
    """Once the meter's money has committed: endpoint → fen its replicas' minutes cost."""
    bulk_set(Endpoint, [(e, fen) for e, fen in accrued.items() if fen], ["cost_fen"], add=True)


def _after(accrued: dict[str, int], short: list[str]) -> None:
    for endpoint_id in short:
        endpoint_suspend(endpoint_id=endpoint_id)
    if any(accrued.values()):
        endpoints_over_budget_suspend()


def meter_hooks_install() -> None:
    """From EndpointsConfig.ready: an endpoint's replicas are metered holdings."""
    meter_hooks_register(HoldingKind.REPLICA, MeterHooks(accrued=_costs_add, after=_after))
