"""starverse.core.db.compile_once: an ORM query's SQL built once, run with other values of its
named parameters, answers what the ORM answers for those values."""

import pytest

from billing.models import Wallet
from starverse.core.db import compile_once
from tests.factories import fund, make_user

SENTINEL = "tnt_compile_once_sentinel"


@pytest.mark.django_db
def test_a_compiled_query_answers_as_the_orm_for_each_value():
    users = [make_user() for _ in range(2)]
    fund(users[1], 5_000)
    compiled = compile_once(
        Wallet.objects.filter(tenant_id=SENTINEL).values("tenant_id", "cash_fen"),
        {"tenant": SENTINEL},
    )

    for user in users:
        expected = list(
            Wallet.objects.filter(tenant_id=user.tenant_id).values("tenant_id", "cash_fen")
        )
        assert compiled.rows(tenant=user.tenant_id) == expected
    assert compiled.rows(tenant="tnt_nobody") == []


def test_a_sentinel_the_query_does_not_use_is_refused():
    with pytest.raises(ValueError, match="no parameter for \\['tenant'\\]"):
        compile_once(Wallet.objects.filter(cash_fen=1), {"tenant": SENTINEL})
