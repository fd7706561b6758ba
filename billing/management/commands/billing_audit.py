from typing import Any

from django.core.management.base import BaseCommand, CommandError

from billing.models import Wallet
from billing.selectors import unbalanced_transactions, wallet_drifts
from starverse.core.money import format_fen


class Command(BaseCommand):
    help = "Prove that every wallet's cached balance equals the sum of its ledger entries."

    def handle(self, *args: Any, **options: Any) -> None:
        drifts = wallet_drifts()
        unbalanced = unbalanced_transactions()
        for d in drifts:
            self.stderr.write(
                f"DRIFT wallet={d.wallet_id} cash={format_fen(d.cash_fen)} "
                f"ledger_cash={format_fen(d.ledger_cash_fen)} promo={format_fen(d.promo_fen)} "
                f"ledger_promo={format_fen(d.ledger_promo_fen)} "
                f"arrears={format_fen(d.arrears_fen)} "
                f"ledger_arrears={format_fen(d.ledger_arrears_fen)}"
            )
        for txn in unbalanced:
            self.stderr.write(f"UNBALANCED transaction={txn}")
        if drifts or unbalanced:
            raise CommandError(
                f"{len(drifts)} wallet(s) drift from the ledger, {len(unbalanced)} transaction(s) "
                "unbalanced."
            )
        self.stdout.write(f"OK: {Wallet.objects.count()} wallet(s) equal their ledger sums.")
