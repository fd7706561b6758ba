"""The platform's locks: the advisory-lock keys in one enumeration, the advisory locks taken by
name, and the order every lock is taken in.

All are PostgreSQL locks held to the end of the transaction that takes them (released at commit
or rollback), so no path can forget to release one.

Lock order: a transaction that holds a lock never waits for one earlier in this list, so two
transactions can never wait on each other.

1. A product's row: an instance (instances.states.instance_locked), a gang's members (a
   cluster's ranks), in the gang's order (instances.states.gang_locked), an endpoint
   (endpoints.services.endpoint_locked).
2. The GPU model's placement lock (gpu_model_placement_lock, below): exclusive to place a queued
   order or a gang, shared among new single orders.
3. A node claim (node_claim, node_claim_first, below): the node an order is placing on.
4. Disks (storage.disks), then the shared storage of a tenant.
5. The wallet, last (billing.selectors.wallet_locked and wallets_locked, in id order): the
   ledger posts under it, and a decision that must hold against the balance until it commits
   reads it so. Every path locks a wallet through those two functions.

Row locks live with their rows' models (the lowest app that can read them); the advisory locks
need no model and live here."""

from enum import IntEnum

from django.db import connection


class AdvisoryLock(IntEnum):
    """The key spaces of pg_advisory_xact_lock(int, int): the first int says which resource,
    the second is hashtext() of its id. New spaces are added here, never reused."""

    GPU_MODEL_PLACEMENT = 0x5E0C
    NODE_CLAIM = 0x5E0D


def advisory_lock(space: AdvisoryLock, key: str, *, shared: bool = False) -> None:
    """Take the lock of `key` in `space` (exclusive, or `shared`), waiting for the transaction
    that holds it to end. The lock manager queues waiters fairly: a waiting exclusive lock holds
    back later shared ones; taking it writes nothing (unlike FOR SHARE on a row)."""
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s, hashtext(%s))", [int(space), key])


# The first of the keys (an array, best first) that no other transaction holds, taken now: one
# round trip however many are held. The recursive query tries them strictly in turn and stops
# at the first it gets, so it never holds a key it does not use.
_TRY_FIRST_SQL = """
WITH RECURSIVE attempt(n, got) AS (
  SELECT 0, FALSE
  UNION ALL
  SELECT n + 1, pg_try_advisory_xact_lock(%(space)s, hashtext((%(keys)s::text[])[n + 1]))
    FROM attempt WHERE NOT got AND n < cardinality(%(keys)s::text[])
)
SELECT n FROM attempt WHERE got
"""


def advisory_lock_first_free(space: AdvisoryLock, keys: list[str]) -> int | None:
    """Take the lock of the first of `keys` that no other transaction holds, without waiting:
    its index, or None when every one is held (a key this transaction holds already counts as
    free)."""
    with connection.cursor() as cursor:
        cursor.execute(_TRY_FIRST_SQL, {"space": int(space), "keys": keys})
        row = cursor.fetchone()
    return None if row is None else row[0] - 1


def gpu_model_placement_lock(gpu_model_id: str, *, shared: bool = False) -> None:
    """The GPU model's placement lock: exclusive while a queued order or a gang is placed and
    the queue is read, `shared` among new single orders (which claim nodes one by one)."""
    advisory_lock(AdvisoryLock.GPU_MODEL_PLACEMENT, gpu_model_id, shared=shared)


def node_claim(node_id: str) -> None:
    """Claim a node for a placement, waiting for the transaction that holds it to end."""
    advisory_lock(AdvisoryLock.NODE_CLAIM, node_id)


def node_claim_first(node_ids: list[str]) -> int | None:
    """Claim the first of `node_ids` (best first) no other placement holds: its index, or None
    when every one is held."""
    return advisory_lock_first_free(AdvisoryLock.NODE_CLAIM, node_ids)
