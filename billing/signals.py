"""Signals other apps listen to. `wallet_credited` is sent after the commit of money coming in
from outside: a paid top-up, a bank transfer, an operator's credit (not trial credit, not
reversals of charges)."""

from django.dispatch import Signal

wallet_credited = Signal()  # kwargs: wallet_id, tenant_id, amount_fen
