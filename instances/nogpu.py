"""No-GPU mode (无卡模式): a stopped instance started without its GPUs, with its disks, NAS,
image and SSH, to install packages, download data or edit code for cents an hour, then started
again with its GPUs (a normal start).

It goes through the compute core like any start: admission (compute.admission.admit, an
Order with `cpu_only`: a runway of one hour at the offering's cpu_only_price_per_hour_fen,
which trial credit pays as well; no GPU limit counts it), placement
(compute.placement.choose_cpu_only: any ready node of the instance's region with room for its
CPU and memory, a CPU-only node first), its holding (placed with no allocations, on
`cpu_node`, `gpus_attached` False) and the meter (compute.metering prices its minutes at the
no-GPU price). It never waits in the queue: with no room now, the start is refused and the
instance stays stopped.

A monthly rental in its paid month keeps its GPUs reserved either way: started without them it
runs on its own node, the month paying for both (no no-GPU price on top); once its month has
ended it is billed by the minute like any instance."""

from django.utils.translation import gettext as _

from billing.holds import account_hold_check
from compute.admission import admit
from compute.choices import BillingMode
from compute.holdings import holds_gpus
from compute.placement import choose_cpu_only
from instances.admission import order_of
from instances.charges import period_active
from instances.models import Instance
from instances.states import instance_mark_placed_cpu_only, instance_mark_provisioning
from starverse.core.errors import Conflict


def start_cpu_only(instance: Instance) -> None:
    """Start a stopped or failed instance (locked, checked by instances.lifecycle.
    instance_start) in no-GPU mode, or refuse: 409 `no_gpu_mode_unavailable` when its
    offering has no no-GPU price or its monthly month is unpaid, the admission's answers
    (402, 409, 423), and 409 `no_capacity` when no node has room for it now."""
    offering = instance.offering
    if offering.cpu_only_price_per_hour_fen is None:
        raise Conflict(
            _(
                "No-GPU mode is not offered for %(offering)s. Start the instance with its GPUs "
                "instead."
            )
            % {"offering": offering},
            code="no_gpu_mode_unavailable",
        )
    if period_active(instance) and holds_gpus(instance.id):
        # its GPUs are its own until the month ends, and the month pays for this too
        account_hold_check(instance.tenant_id)
        instance_mark_provisioning(instance, gpus_attached=False)
        return
    if instance.billing == BillingMode.MONTHLY:
        raise Conflict(
            _(
                "This monthly rental's paid month has ended. Start it with its GPUs to pay the "
                "next month, then start it without GPUs whenever you like."
            ),
            code="no_gpu_mode_unavailable",
        )
    node = choose_cpu_only(offering, instance.region_id or "")
    if node is None:
        raise Conflict(
            _(
                "No node has room for this instance's CPU and memory without GPUs right now. "
                "Try again in a few minutes, or start it with its GPUs."
            ),
            code="no_capacity",
        )
    instance_mark_placed_cpu_only(instance, node)
    admit(order_of(instance, cpu_only=True))
