"""Invoices (发票): the tenant's invoice profile, requests for an invoice over paid cash, and
the operator's decision on each (issued with a PDF or a number, or rejected with a reason).

What may be invoiced is cash the tenant paid in (top-ups and bank transfers, less reversals of
them), with the invoiceable portions transfers carried in less those they carried out, minus
what went back (refunds that are pending or done, chargebacks not won back) minus requests
already made (requested or issued): billing.selectors.InvoiceFunds. A transfer carries only
paid cash not yet invoiced (billing.services.transfer_post), so money moved between wallets is
invoiced once. A request is checked and written under the wallet's row lock, the lock the
ledger posts under, so two requests, or a request and a refund or a transfer, cannot together
take more than was paid."""

import hashlib
import json
import logging
import re
from typing import TYPE_CHECKING, Any

from django.core.files.base import File
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from billing.choices import INVOICE_TRANSITIONS, InvoiceKind, InvoiceStatus
from billing.models import InvoiceProfile, InvoiceRequest
from billing.selectors import invoice_funds_of, wallet_locked
from events.choices import EventType
from events.emit import emit
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, FieldInvalid, IdempotencyConflict, InvalidInput
from starverse.core.money import format_fen

if TYPE_CHECKING:
    from starverse.accounts.models import User

logger = logging.getLogger(__name__)

# GB 32100-2015: the 31 characters a 统一社会信用代码 uses (no I, O, S, V, Z) and the weights
# of its first 17 positions; the 18th is the check character.
TAX_CHARSET = "0123456789ABCDEFGHJKLMNPQRTUWXY"
TAX_WEIGHTS = (1, 3, 9, 27, 19, 26, 16, 17, 20, 29, 25, 13, 8, 24, 10, 30, 28)
PROFILE_FIELDS = (
    "kind",
    "title",
    "tax_number",
    "address",
    "phone",
    "bank",
    "bank_account",
    "email",
)
# What a special invoice needs besides the title and e-mail, with the names people read.
SPECIAL_REQUIRED = {
    "tax_number": gettext_lazy("tax number"),
    "address": gettext_lazy("registered address"),
    "phone": gettext_lazy("phone number"),
    "bank": gettext_lazy("bank"),
    "bank_account": gettext_lazy("bank account"),
}
PDF_MAX_BYTES = 10 * 1024 * 1024


def tax_number_valid(value: str) -> bool:
    """Whether `value` is a well-formed 统一社会信用代码: 18 characters of the GB 32100-2015
    set whose last is the check character of the first 17."""
    if len(value) != 18 or any(c not in TAX_CHARSET for c in value):
        return False
    total = sum(TAX_CHARSET.index(c) * w for c, w in zip(value[:17], TAX_WEIGHTS, strict=True))
    return TAX_CHARSET[(31 - total % 31) % 31] == value[17]


def _clean_profile(data: dict[str, Any]) -> dict[str, str]:
    cleaned = {name: str(data.get(name) or "").strip() for name in PROFILE_FIELDS}
    cleaned["tax_number"] = re.sub(r"\s", "", cleaned["tax_number"]).upper()
    cleaned["kind"] = cleaned["kind"] or InvoiceKind.GENERAL
    if cleaned["kind"] not in InvoiceKind.values:
        raise FieldInvalid("kind", _("The invoice kind is general or special."))
    if not cleaned["title"]:
        raise FieldInvalid("title", _("The invoice title (发票抬头) is required."))
    if not cleaned["email"]:
        raise FieldInvalid("email", _("An e-mail address for the invoice is required."))
    if cleaned["tax_number"] and not tax_number_valid(cleaned["tax_number"]):
        raise FieldInvalid(
            "tax_number",
            _(
                "%(number)s is not a valid unified social credit code (统一社会信用代码): 18 "
                "characters whose last is the check character."
            )
            % {"number": cleaned["tax_number"]},
            code="invalid_tax_number",
        )
    if cleaned["kind"] == InvoiceKind.SPECIAL:
        for name, label in SPECIAL_REQUIRED.items():
            if not cleaned[name]:
                raise FieldInvalid(
                    name,
                    _("A special VAT invoice (专用发票) needs the %(field)s.") % {"field": label},
                )
    return cleaned


def invoice_profile_save(*, tenant_id: str, data: dict[str, Any]) -> InvoiceProfile:
    """Create or replace the tenant's invoice profile (every field, as a PUT does)."""
    cleaned = _clean_profile(data)
    profile, _created = InvoiceProfile.objects.update_or_create(
        tenant_id=tenant_id, defaults={**cleaned, "updated_at": timezone.now()}
    )
    return profile


def invoice_profile_for(tenant_id: str) -> InvoiceProfile | None:
    return InvoiceProfile.objects.filter(tenant_id=tenant_id).first()


def invoiced_over_paid_fen(tenant_id: str) -> int:
    """How far invoices requested or issued exceed the paid cash left after refunds; 0 when
    they do not."""
    return invoice_funds_of(tenant_id).over_invoiced_fen


def invoiceable_fen(tenant_id: str) -> int:
    """What the tenant may still ask an invoice for (never below zero)."""
    return invoice_funds_of(tenant_id).invoiceable_fen


def _request_hash(amount_fen: int) -> str:
    return hashlib.sha256(json.dumps({"amount_fen": amount_fen}).encode()).hexdigest()


def _requested_before(tenant_id: str, key: str, request_hash: str) -> InvoiceRequest | None:
    if not key:
        return None
    found = InvoiceRequest.objects.filter(tenant_id=tenant_id, idempotency_key=key).first()
    if found is not None and found.request_hash != request_hash:
        raise IdempotencyConflict(_("This Idempotency-Key was used for a different request."))
    return found


def invoice_request(
    *, user: "User", amount_fen: int, idempotency_key: str = ""
) -> tuple[InvoiceRequest, bool]:
    """Ask for an invoice over `amount_fen` of paid cash, to the tenant's current profile.
    Returns (request, created); the same Idempotency-Key answers the same request. Refused
    (400, naming amount_fen) above the invoiceable amount, which is read under the wallet lock."""
    tenant_id = user.tenant_id
    if isinstance(amount_fen, bool) or not isinstance(amount_fen, int) or amount_fen <= 0:
        raise FieldInvalid("amount_fen", _("The amount must be a positive number of fen."))
    request_hash = _request_hash(amount_fen)
    earlier = _requested_before(tenant_id, idempotency_key, request_hash)
    if earlier is not None:
        return earlier, False
    profile = invoice_profile_for(tenant_id)
    if profile is None:
        raise InvalidInput(
            _("Fill in your invoice details (title, tax number, e-mail) first."),
            code="no_invoice_profile",
        )
    try:
        with transaction.atomic():
            wallet_locked(tenant_id)
            available = invoiceable_fen(tenant_id)
            if amount_fen > available:
                raise FieldInvalid(
                    "amount_fen",
                    _(
                        "%(amount)s is more than can be invoiced: %(available)s (top-ups and "
                        "bank transfers paid in, with the paid cash not yet invoiced that "
                        "transfers carried in less what they carried out, less refunds and "
                        "invoices already requested)."
                    )
                    % {"amount": format_fen(amount_fen), "available": format_fen(available)},
                    code="over_invoiceable",
                )
            item = InvoiceRequest.objects.create(
                tenant_id=tenant_id,
                requested_by=user,
                amount_fen=amount_fen,
                profile={name: getattr(profile, name) for name in PROFILE_FIELDS},
                idempotency_key=idempotency_key,
                request_hash=request_hash,
            )
    except IntegrityError:
        # a concurrent request under the same key committed first: this is a repeat of it
        earlier = _requested_before(tenant_id, idempotency_key, request_hash)
        if earlier is None:
            raise
        return earlier, False
    logger.info(
        "invoice.requested invoice=%s tenant=%s amount_fen=%d", item.id, tenant_id, amount_fen
    )
    return item, True


def _decide(invoice_id: str, to: InvoiceStatus) -> InvoiceRequest:
    """The request under its row lock, checked to be allowed to move to `to`."""
    item = InvoiceRequest.objects.select_for_update().get(pk=invoice_id)
    if to not in INVOICE_TRANSITIONS[InvoiceStatus(item.status)]:
        raise Conflict(
            _("Invoice request %(id)s is already %(status)s.")
            % {"id": item.id, "status": item.get_status_display().lower()},
            code="invoice_decided",
        )
    return item


def _issued(item: InvoiceRequest) -> dict[str, object]:
    return {
        "id": item.id,
        "name": item.number or item.id,
        "number": item.number,
        "amount_fen": item.amount_fen,
        "url": "/billing/",
    }


def invoice_issue(
    *,
    invoice_id: str,
    actor: "User",
    number: str = "",
    pdf: File[bytes] | None = None,
    note: str = "",
) -> InvoiceRequest:
    """Mark a request issued with the invoice's number, its PDF, or both; the tenant is
    e-mailed after commit."""
    number = number.strip()
    if not number and pdf is None:
        raise InvalidInput(_("Attach the invoice PDF or enter its number."))
    if pdf is not None and pdf.size is not None and pdf.size > PDF_MAX_BYTES:
        raise InvalidInput(_("The PDF is larger than 10 MB."))
    if pdf is not None and not bytes(pdf.read(5)).startswith(b"%PDF-"):
        raise InvalidInput(_("The file is not a PDF."))
    with transaction.atomic():
        item = _decide(invoice_id, InvoiceStatus.ISSUED)
        if pdf is not None:
            pdf.seek(0)
            item.pdf.save(f"{item.id}.pdf", pdf, save=False)
        now = timezone.now()
        item.status, item.number, item.decided_by = InvoiceStatus.ISSUED, number, actor
        item.issued_at = item.decided_at = now
        item.note = note.strip() or item.note
        item.save(
            update_fields=[
                "status",
                "number",
                "pdf",
                "decided_by",
                "issued_at",
                "decided_at",
                "note",
            ]
        )
        enqueue_on_commit("billing.tasks.send_invoice_notice", item.id)
        emit(item.tenant_id, EventType.INVOICE_ISSUED, _issued(item))
    logger.info("invoice.issued invoice=%s by=%s", item.id, getattr(actor, "pk", None))
    return item


def invoice_reject(*, invoice_id: str, actor: "User", reason: str) -> InvoiceRequest:
    """Reject a request with a reason (the tenant is e-mailed it); its amount is free again."""
    reason = reason.strip()
    if not reason:
        raise InvalidInput(_("A reason is required."))
    with transaction.atomic():
        item = _decide(invoice_id, InvoiceStatus.REJECTED)
        item.status, item.note, item.decided_by = InvoiceStatus.REJECTED, reason, actor
        item.decided_at = timezone.now()
        item.save(update_fields=["status", "note", "decided_by", "decided_at"])
        enqueue_on_commit("billing.tasks.send_invoice_notice", item.id)
    logger.info("invoice.rejected invoice=%s by=%s", item.id, getattr(actor, "pk", None))
    return item
