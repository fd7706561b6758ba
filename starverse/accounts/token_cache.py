"""A short per-process memory of the API tokens that authenticated: token hash → the user's row
and the token's fields, kept API_TOKEN_CACHE_S seconds from the lookup that read them (use
does not extend it). Every API request authenticates; a hit saves the lookup's round trip.

A change to a token, its user or the team membership behind it made through the services holds
at once in every process: the process that makes it forgets every entry at once
(token_cache_forget), and again when the change commits, when it also raises the credentials
generation in the cache (starverse.core.api.throttling.credentials_changed). Every other process
reads that generation in the throttle's one cache round trip of each API request: when it has
moved, the process forgets its entries (token_cache_observe), and a request that was served
from an entry looked up before is authenticated again from the database before its view runs.
Only a change made outside the services (a database shell) waits for the entries to expire.
Failures are never kept: a refused token is looked up again each time."""

from dataclasses import dataclass
from datetime import datetime
from time import monotonic
from typing import Any

from django.conf import settings
from django.db import transaction

from starverse.core.api.throttling import credentials_changed

# Entries are tiny; past this many (as many live tokens in one process) the lot is dropped.
MAX_ENTRIES = 10_000


@dataclass(slots=True)
class CachedToken:
    """What authentication read for one token: the user's concrete field values, in the
    model's order, and the token's fields. Immutable values only: each request builds its
    own User and ApiToken from them."""

    user_values: tuple[Any, ...]
    token_id: str
    team_id: str | None
    scopes: tuple[str, ...]
    name: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    role: str | None
    max_spend_fen: int | None = None
    max_spend_per_day_fen: int | None = None
    expires_at: datetime | None = None
    expires: float = 0.0
    generation: int = 0  # this process's generation when the lookup began


_entries: dict[str, CachedToken] = {}
# Bumped by every forget: a lookup that began before one does not store what it read, and a
# request served from an entry of an earlier generation is authenticated again.
_generation = [0]
# The credentials generation this process last read from the cache (None: none yet).
_observed: list[int | None] = [None]


def token_cache_get(digest: str) -> CachedToken | None:
    if settings.API_TOKEN_CACHE_S <= 0:
        return None
    entry = _entries.get(digest)
    if entry is None or entry.expires > monotonic():
        return entry
    _entries.pop(digest, None)
    return None


def token_cache_generation() -> int:
    return _generation[0]


def token_cache_put(digest: str, entry: CachedToken, *, generation: int) -> None:
    """Keep a successful lookup that began at `generation` (token_cache_generation)."""
    ttl = settings.API_TOKEN_CACHE_S
    if ttl <= 0 or generation != _generation[0]:
        return
    if len(_entries) >= MAX_ENTRIES:
        _entries.clear()
    entry.expires = monotonic() + ttl
    entry.generation = generation
    _entries[digest] = entry


def _forget() -> None:
    _generation[0] += 1
    _entries.clear()


def _forget_everywhere() -> None:
    _forget()
    credentials_changed()


def token_cache_forget() -> None:
    """After a token is revoked, a user changed or a membership changed: this process
    authenticates every token afresh, now and once the change has committed, and so does every
    other process from its next API request on (the credentials generation is raised then)."""
    _forget()
    transaction.on_commit(_forget_everywhere)


def token_cache_observe(generation: int) -> None:
    """The credentials generation as the cache has it now: if it differs from the one this
    process saw last, a credential changed somewhere since, and every entry is forgotten."""
    if _observed[0] != generation:
        _forget()
        _observed[0] = generation
