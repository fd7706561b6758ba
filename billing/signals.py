"""Signals other apps listen to. `wallet_credited` is sent after the commit of every posting
that adds money to a wallet (a top-up, a bank transfer, an operator credit)."""

from django.dispatch import Signal

wallet_credited = Signal()  # kwargs: wallet_id, tenant_id, amount_fen
