"""ledger_post_spread and ledger_post_contended: postings per second through
billing.services.ledger_post by 8 worker processes, over 1,000 wallets or on one wallet, against
pgbench running the same SQL (lock the wallet, insert the transaction and its entries, update the
balance) at the same concurrency in the same run."""

import multiprocessing
import os
import random
import time
from typing import Any

from bench.common import pgbench, recreate_database, report, setup_django

WORKERS = 8
WALLETS = 1000
SECONDS = int(os.environ.get("BENCH_SECONDS", "10"))


def wallet_id(n: int) -> str:
    return f"wal_b{n:06d}"


def _seed() -> None:
    from django.db import transaction

    from billing.models import Wallet
    from starverse.accounts.models import Tenant

    with transaction.atomic():
        tenants = Tenant.objects.bulk_create(
            [Tenant(id=f"tnt_b{n:06d}", name=f"bench {n}") for n in range(1, WALLETS + 1)]
        )
        Wallet.objects.bulk_create(
            [Wallet(id=wallet_id(n), tenant=t) for n, t in enumerate(tenants, start=1)]
        )


def _worker(args: tuple[int, bool, Any, "multiprocessing.Queue[int]"]) -> None:
    index, contended, ready, results = args
    setup_django()
    from billing.choices import TransactionKind
    from billing.services import ledger_post

    rng = random.Random(index)
    count = 0
    ready.wait()  # every process has imported Django: start together
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline:
        wallet = wallet_id(1 if contended else rng.randint(1, WALLETS))
        credit = count % 2 == 0
        ledger_post(
            wallet_id=wallet,
            key=f"bench:{'c' if contended else 's'}:{index}:{count}",
            kind=TransactionKind.TOPUP if credit else TransactionKind.USAGE,
            amount_fen=100 if credit else -50,
            description="bench",
            allow_partial=True,
        )
        count += 1
    results.put(count)


def _run_ours(contended: bool) -> float:
    """Postings per second of WORKERS processes that start posting together once all of them
    are ready (a start time fixed in advance measured nothing on a loaded machine, where
    importing Django took longer than the margin)."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    ready = ctx.Barrier(WORKERS)
    processes = [
        ctx.Process(target=_worker, args=((i, contended, ready, results),)) for i in range(WORKERS)
    ]
    for process in processes:
        process.start()
    total = sum(results.get(timeout=SECONDS + 300) for _ in processes)
    for process in processes:
        process.join()
    return total / SECONDS


PGBENCH_SCRIPT = """
\\set w {wallet}
BEGIN;
SELECT cash_fen, promo_fen, postings FROM billing_wallet
  WHERE id = 'wal_b' || lpad(:w::text, 6, '0') FOR UPDATE;
WITH t AS (
  INSERT INTO billing_ledgertransaction (id, wallet_id, kind, idempotency_key, request_hash,
    amount_fen, cash_delta_fen, promo_delta_fen, cash_after_fen, promo_after_fen, description,
    reason, instance_id, seq, created_at)
  VALUES ('txn_' || substr(md5(random()::text), 1, 20), 'wal_b' || lpad(:w::text, 6, '0'), 'topup',
    'pgbench:' || md5(random()::text || clock_timestamp()::text), '', 100, 100, 0, 0, 0, 'bench',
    '', '', (SELECT postings + 1 FROM billing_wallet
             WHERE id = 'wal_b' || lpad(:w::text, 6, '0')), now())
  RETURNING id)
INSERT INTO billing_ledgerentry (transaction_id, wallet_id, account, amount_fen)
  SELECT id, 'wal_b' || lpad(:w::text, 6, '0'), 'cash', 100 FROM t
  UNION ALL SELECT id, NULL, 'platform:payments', -100 FROM t;
UPDATE billing_wallet SET cash_fen = cash_fen + 100, postings = postings + 1
  WHERE id = 'wal_b' || lpad(:w::text, 6, '0');
COMMIT;
"""


def run() -> list[dict]:
    recreate_database()
    _seed()
    lines = []
    for name, contended, goal in (
        ("ledger_post_spread", False, 0.40),
        ("ledger_post_contended", True, 0.40),
    ):
        ours = _run_ours(contended)
        wallet = "1" if contended else f"random(1, {WALLETS})"
        baseline = pgbench(PGBENCH_SCRIPT.format(wallet=wallet), clients=WORKERS, seconds=SECONDS)
        lines.append(
            report(
                name,
                ours,
                "postings/s",
                baseline,
                f"pgbench same SQL, {WORKERS} clients",
                f"ratio >= {goal}",
            )
        )
    from billing.selectors import wallet_drifts

    assert not wallet_drifts(), "benchmark left wallets drifting from the ledger"
    return lines
