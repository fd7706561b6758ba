"""How the instances app takes part in order admission (compute.admission, the rule for every
product): an instance's order (order_of: a cluster's rank stands for its whole cluster), its
runway, a monthly rental's next month as an order, and the reader admission counts a tenant
with (InstancesReads: what its instances burn an hour and hold, and the budgets that apply to
the orderer, endpoints' replicas included through instances.budgets), registered from
InstancesConfig.ready."""

from dataclasses import replace
from datetime import datetime

from billing.models import Wallet
from billing.selectors import wallet_locked
from compute.admission import (
    AdmissionReads,
    Runway,
    Usage,
    admission_reader_register,
    order_runway,
)
from compute.orders import Order, OrderKey
from instances.budgets import budget_check, budget_refusal
from instances.charges import period_active
from instances.choices import InstanceStatus
from instances.gangs import gang_members, gang_of
from instances.models import Instance
from instances.selectors import admission_reads, spend_rows, tenant_usage
from starverse.core.text import Deferred


def order_of(
    instance: Instance, *, key: OrderKey | None = None, nodes: int = 0, cpu_only: bool = False
) -> Order:
    """The order of a saved instance (ordered now, or started): a cluster's rank stands for its
    whole cluster, of `nodes` ranks (counted when 0), which are placed, started and billed
    together. `key`: the order's Idempotency-Key (None for a start). `cpu_only`: a start in
    no-GPU mode (instances.nogpu), of no GPUs at the offering's no-GPU price."""
    gang = gang_of(instance)
    if gang and not nodes:
        nodes = gang_members(gang).count()
    units = nodes if gang else 1
    return Order(
        product="cluster" if gang else "instance",
        tenant_id=instance.tenant_id,
        created_by_id=instance.created_by_id,
        offering=instance.offering,
        gpus=0 if cpu_only else instance.offering.gpu_count * units,
        billing=instance.billing,
        units=units,
        region_id=instance.region_id,
        key=key,
        pk=instance.id,
        gang=gang,
        paid=period_active(instance),
        queued=instance.status == InstanceStatus.QUEUED,
        cpu_only=cpu_only,
    )


def runway_of(instance: Instance, wallet: Wallet, *, burn: tuple[int, int] | None = None) -> Runway:
    """An instance's runway; a cluster's rank stands for its whole cluster (order_of)."""
    return order_runway(order_of(instance), wallet, burn=burn)


def renewal_refusal(instance: Instance, *, now: datetime) -> Deferred | None:
    """A monthly rental's next month, admitted as an order of one more month of it (of this
    rank alone, for a cluster's): under the tenant's wallet lock, so that the budgets' reads and
    the charge that follows hold together against orders at the same moment, its orderer's and
    its team's budgets. None when they fit, else why not (the rental ends instead:
    instances.monthly); the balance is the charge's to refuse."""
    order = replace(order_of(instance, nodes=1), paid=False)
    wallet_locked(order.tenant_id)
    return budget_refusal(order, order.own_fen, renewal=True, now=now)


class InstancesReads:
    """compute.admission's reader: the instances app counts a tenant (instances.selectors,
    instances.budgets)."""

    def reads(self, order: Order) -> AdmissionReads:
        return admission_reads(
            order.tenant_id, order.created_by_id, exclude=order.pk or "", exclude_gang=order.gang
        )

    def burn(self, order: Order) -> tuple[int, int]:
        rows = spend_rows(
            [order.tenant_id], starting=True, exclude=order.pk or "", exclude_gang=order.gang
        )
        return (rows[0][1] or 0, rows[0][2] or 0) if rows else (0, 0)

    def usage(self, tenant_id: str) -> Usage:
        return tenant_usage(tenant_id)

    def budget_check(
        self, order: Order, need_fen: int, budgets: list[tuple[str | None, int]]
    ) -> None:
        budget_check(order, need_fen, budgets=budgets)


def admission_reader_install() -> None:
    """From InstancesConfig.ready: admission counts tenants through the instances app."""
    admission_reader_register(InstancesReads())
