"""A transfer's invoiceable portion (LedgerTransaction.invoiceable_delta_fen): the part of the
cash it moves that carries the right to a 发票 from the source wallet to the target, written
as the transfer is posted (billing.services.transfer_post): at most what the source had paid
in and not yet invoiced.

Transfers posted before carried their whole amount. Their portions are found by replaying
history, oldest first, under today's rule: for a transfer that moved paid cash not yet invoiced
(what people do) that is its whole amount, so what they may invoice is unchanged; for one that
moved invoiced or never-paid cash it is less, so invoiceability that a loop through wallets
made is not left to claim, and `make audit` (billing_audit) names the accounts that invoiced
it. Only requests, refunds and chargebacks that still hold count, from when they were made
(a rejected request or a failed refund no longer shows when it was let go): the replay errs
towards carrying more, never more than the whole amount.

Ledger rows are append-only (0002): for this backfill of the column added here, the row
trigger of billing_ledgertransaction is lifted inside this migration's transaction and put back
before it commits (ALTER TABLE takes the table's exclusive lock: no other session writes or
reads a row meanwhile); no other column changes."""

from collections import defaultdict

from django.conf import settings
from django.db import migrations, models
from django.db.models import Q

TABLE = "billing_ledgertransaction"
PAID_IN = ("topup", "bank_transfer")


def _changes(apps):
    """(when, tenant, fen) of everything but transfers that changes what a tenant may invoice:
    paid cash and its reversals in, refunds, chargebacks and requests that hold out."""
    txn = apps.get_model("billing", "LedgerTransaction").objects
    paid = txn.filter(Q(kind__in=PAID_IN) | Q(kind="reversal", reverses__kind__in=PAID_IN))
    yield from paid.values_list("created_at", "wallet__tenant_id", "cash_delta_fen")
    refunds = apps.get_model("billing", "Refund").objects.filter(status__in=("pending", "succeeded"))
    for at, tenant, fen in refunds.values_list("created_at", "topup__tenant_id", "amount_fen"):
        yield at, tenant, -fen
    disputes = apps.get_model("billing", "Dispute").objects.filter(
        debit_transaction__isnull=False, credit_transaction__isnull=True
    )
    for at, tenant, fen in disputes.values_list(
        "debit_transaction__created_at", "topup__tenant_id", "amount_fen"
    ):
        yield at, tenant, -fen
    requests = apps.get_model("billing", "InvoiceRequest").objects.filter(
        status__in=("requested", "issued")
    )
    for at, tenant, fen in requests.values_list("created_at", "tenant_id", "amount_fen"):
        yield at, tenant, -fen


def _transfers(apps):
    """(when, out leg, in leg, source, target, amount) of every transfer, by its legs' keys
    (transfer:{key}:out and transfer:{key}:in)."""
    legs = defaultdict(dict)
    rows = apps.get_model("billing", "LedgerTransaction").objects.filter(kind="transfer")
    for txn_id, key, at, tenant, fen in rows.values_list(
        "id", "idempotency_key", "created_at", "wallet__tenant_id", "cash_delta_fen"
    ):
        pair, _colon, leg = key.rpartition(":")
        legs[pair][leg] = (txn_id, at, tenant, fen)
    for pair in legs.values():
        if "out" in pair and "in" in pair:
            out_id, at, source, fen = pair["out"]
            yield at, out_id, pair["in"][0], source, pair["in"][2], -fen


def portions(apps):
    """(portion, row id) of each transfer leg that carries one, history replayed in order."""
    events = [(at, (tenant, fen)) for at, tenant, fen in _changes(apps)]
    events += [(at, legs) for at, *legs in _transfers(apps)]
    events.sort(key=lambda event: event[0])
    uninvoiced = defaultdict(int)
    carried = []
    for _at, event in events:
        if len(event) == 2:
            tenant, fen = event
            uninvoiced[tenant] += fen
            continue
        out_id, in_id, source, target, amount = event
        portion = min(amount, max(0, uninvoiced[source]))
        uninvoiced[source] -= portion
        uninvoiced[target] += portion
        if portion:
            carried += [(-portion, out_id), (portion, in_id)]
    return carried


def backfill(apps, schema_editor):
    carried = portions(apps)
    update = f"UPDATE {TABLE} SET invoiceable_delta_fen = %s WHERE id = %s"
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {TABLE} DISABLE TRIGGER {TABLE}_immutable")
        cursor.executemany(update, carried)
        cursor.execute(f"ALTER TABLE {TABLE} ENABLE TRIGGER {TABLE}_immutable")


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0009_ledger_price_kind"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="ledgertransaction",
            name="invoiceable_delta_fen",
            field=models.BigIntegerField(
                db_default=0,
                default=0,
                help_text="A transfer's change of what the wallet may invoice: the part of its "
                "amount that was paid cash not yet invoiced at the source "
                "(billing.services.transfer_post), negative on the way out. 0 for every other "
                "kind.",
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="ledgertransaction",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("invoiceable_delta_fen", 0),
                    models.Q(
                        ("invoiceable_delta_fen__gt", 0),
                        ("invoiceable_delta_fen__lte", models.F("cash_delta_fen")),
                        ("kind", "transfer"),
                    ),
                    models.Q(
                        ("invoiceable_delta_fen__gte", models.F("cash_delta_fen")),
                        ("invoiceable_delta_fen__lt", 0),
                        ("kind", "transfer"),
                    ),
                    _connector="OR",
                ),
                name="ledger_invoiceable_only_within_a_transfer",
            ),
        ),
    ]
