"""Account holds: a tenant whose payment was disputed, or whose wallet a refund made outside this
platform drove into arrears, may place no new orders (instances, starts, storage) until an
operator lifts the hold. Top-ups stay allowed, so that arrears can be paid. Running instances
are left to the ordinary rules: billed per minute and stopped when the balance runs out."""

import logging
from typing import TYPE_CHECKING

from django.db import connection, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from billing.models import AccountHold, Dispute, Refund
from starverse.core.errors import Conflict, Forbidden, InvalidInput

if TYPE_CHECKING:
    from starverse.accounts.models import User

logger = logging.getLogger(__name__)


def tenant_on_hold(tenant_id: str) -> bool:
    # a plain query: every order asks it
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {AccountHold._meta.db_table} "  # noqa: S608
            "WHERE tenant_id = %s AND lifted_at IS NULL LIMIT 1",
            [tenant_id],
        )
        return cursor.fetchone() is not None


def account_hold_check(tenant_id: str) -> None:
    """Refuse (403 `account_on_hold`) what would start new spending while the tenant is held."""
    if tenant_on_hold(tenant_id):
        raise Forbidden(
            _(
                "A payment on your account was disputed or refunded, so new instances and storage "
                "are paused. Top-ups still work. Contact support to lift the hold."
            ),
            code="account_on_hold",
        )


def hold_place(
    *,
    tenant_id: str,
    key: str,
    reason: str,
    dispute: Dispute | None = None,
    refund: Refund | None = None,
) -> tuple[AccountHold, bool]:
    """Hold the tenant for one cause, once per `key` (a unique column): a second call for the
    same cause returns the first hold, lifted or not, and never places it again."""
    with transaction.atomic():
        hold, created = AccountHold.objects.get_or_create(
            key=key,
            defaults={
                "tenant_id": tenant_id,
                "reason": reason,
                "dispute": dispute,
                "refund": refund,
            },
        )
    if created:
        logger.warning(
            "billing.account_hold_placed hold=%s tenant=%s key=%s", hold.id, tenant_id, key
        )
    return hold, created


def hold_lift(*, hold_id: str, reason: str, actor: "User") -> AccountHold:
    """An operator's lift of one hold, with the reason, the operator and the time kept on it.
    The tenant may order again once no hold of theirs is open."""
    if not getattr(actor, "is_staff", False):
        raise InvalidInput(_("Only operators can do this."))
    if not reason or not reason.strip():
        raise InvalidInput(_("A reason is required."))
    with transaction.atomic():
        hold = AccountHold.objects.select_for_update().get(pk=hold_id)
        if hold.lifted_at is not None:
            raise Conflict(_("This hold was already lifted."))
        hold.lifted_at, hold.lifted_by, hold.lift_reason = timezone.now(), actor, reason.strip()
        hold.save(update_fields=["lifted_at", "lifted_by", "lift_reason"])
    logger.warning(
        "billing.account_hold_lifted hold=%s tenant=%s by=%s still_held=%s",
        hold.id,
        hold.tenant_id,
        actor.pk,
        tenant_on_hold(hold.tenant_id),
    )
    return hold
