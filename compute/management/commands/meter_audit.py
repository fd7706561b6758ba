from typing import Any

from django.core.management.base import BaseCommand, CommandError

from compute.selectors import pending_drifts
from starverse.core.money import format_fen


class Command(BaseCommand):
    help = (
        "Prove that every wallet's pending usage (accrued by the meter, not yet posted) equals "
        "the sum of its holdings' pending amounts."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        drifts = pending_drifts()
        for d in drifts:
            self.stderr.write(
                f"PENDING_DRIFT wallet={d.wallet_id} "
                f"pending_cash={format_fen(d.pending_cash_fen)} "
                f"holdings_cash={format_fen(d.holdings_cash_fen)} "
                f"pending_promo={format_fen(d.pending_promo_fen)} "
                f"holdings_promo={format_fen(d.holdings_promo_fen)}"
            )
        if drifts:
            raise CommandError(f"{len(drifts)} wallet(s) hold other pending usage than accrued.")
        self.stdout.write("OK: every wallet's pending usage equals its holdings'.")
