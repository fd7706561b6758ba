"""An order's admission reads (spend, limits, usage, budgets) in one statement give what each of
their own queries gives."""

import pytest

from compute.admission import tenant_limits
from compute.models import Offering, TenantLimits
from instances.models import Instance
from instances.selectors import admission_reads, spend_rows, tenant_usage
from starverse.accounts.models import Budget
from tests.factories import holding_save, make_user


def _instance(user, offering, status, **fields):
    instance = Instance.objects.create(
        tenant_id=user.tenant_id,
        created_by=user,
        offering=offering,
        image_id="pytorch-2.1",
        status=status,
        **fields,
    )
    holding_save(instance, waiting=status == "queued")
    return instance


@pytest.mark.parametrize("own_limits", [False, True])
def test_one_statement_reads_what_each_query_reads(db, catalog, own_limits):
    user, other = make_user(), make_user()
    h100, a100_node = catalog["h100x1"], catalog["a100_node"]
    a100x2 = Offering.objects.get(name="2× A100 80GB SXM")
    mine = _instance(user, h100, "queued")  # the order being admitted: left out of the burn
    for status in ("running", "provisioning", "stopping", "queued", "stopped", "checking"):
        _instance(user, a100x2, status)
    _instance(user, a100_node, "running", billing="monthly")  # prepaid: burns nothing
    _instance(other, h100, "running")  # another tenant's
    if own_limits:
        TenantLimits.objects.create(tenant_id=user.tenant_id, max_running_gpus=40)
        Budget.objects.create(tenant_id=user.tenant_id, user=None, monthly_fen=5_000)
        Budget.objects.create(tenant_id=user.tenant_id, user=user, monthly_fen=700)
        Budget.objects.create(tenant_id=user.tenant_id, user=other, monthly_fen=9)

    reads = admission_reads(user.tenant_id, user.pk, exclude=mine.id)

    assert reads is not None
    [(_tenant, cash, trial)] = spend_rows([user.tenant_id], starting=True, exclude=mine.id)
    assert (reads.burn_fen, reads.trial_burn_fen) == (cash, trial or 0)
    assert reads.burn_fen == 3 * a100x2.price_per_hour_fen
    assert reads.limits == tenant_limits(user.tenant_id)
    assert reads.usage == tenant_usage(user.tenant_id)
    assert reads.usage.gpus == 1 + 5 * 2 + 8  # all but the stopped one, and the node
    expected = [(None, 5_000), (user.pk, 700)] if own_limits else []
    assert reads.budgets == expected
