"""The terminal service's ear for access changes: one PostgreSQL connection per process that
LISTENs on starverse.accounts.access.ACCESS_CHANNEL and wakes the open sessions of the person
each notice names, so that a log-out, a new password, a deactivation, a reset second factor or
a membership taken away ends their shells at once (terminal.app checks again and closes).

The connection is made when the first session opens, closed when the last one ends, and read
on the event loop itself (its socket is watched with add_reader: no thread, no polling). When
it breaks (PostgreSQL restarted), every open session is woken to check once, and the
connection is made again after RECONNECT_S; the sessions' own periodic check
(TERMINAL_RECHECK_S) covers the gap."""

import asyncio
import contextlib
import logging
from collections import defaultdict
from typing import Any

import psycopg2
import psycopg2.extensions
from django.db import connections

from starverse.accounts.access import ACCESS_CHANNEL

logger = logging.getLogger(__name__)
RECONNECT_S = 5.0


class AccessWatch:
    """Sessions register an asyncio.Event under their person's id; a notice sets it."""

    def __init__(self) -> None:
        self.waiting: dict[str, set[asyncio.Event]] = defaultdict(set)
        self.connection: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.retry: asyncio.TimerHandle | None = None

    def register(self, user_id: str) -> asyncio.Event:
        self._start()
        event = asyncio.Event()
        self.waiting[user_id].add(event)
        return event

    def unregister(self, user_id: str, event: asyncio.Event) -> None:
        sessions = self.waiting.get(user_id)
        if sessions is not None:
            sessions.discard(event)
            if not sessions:
                del self.waiting[user_id]
        if not self.waiting:  # no one to wake: hold no connection (the next session opens one)
            self._close()

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.loop is not loop:  # a new event loop (tests start several): begin again there
            self._close()
            self.loop = loop
        if self.connection is not None or self.retry is not None:
            return
        try:
            self.connection = psycopg2.connect(**connections["default"].get_connection_params())
            self.connection.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
            with self.connection.cursor() as cursor:
                cursor.execute(f"LISTEN {ACCESS_CHANNEL}")
        except psycopg2.Error as error:
            logger.warning("terminal.watch_unavailable error=%s", str(error).strip())
            self._broken()
            return
        loop.add_reader(self.connection.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            self.connection.poll()
        except psycopg2.Error as error:
            logger.warning("terminal.watch_lost error=%s", str(error).strip())
            self._broken()
            return
        while self.connection.notifies:
            notice = self.connection.notifies.pop(0)
            self._wake(notice.payload)

    def _wake(self, user_id: str) -> None:
        for event in self.waiting.get(user_id, ()):
            event.set()

    def _broken(self) -> None:
        """Wake everyone to check once (a notice may be lost), and listen again later."""
        self._close()
        for user_id in list(self.waiting):
            self._wake(user_id)
        if self.loop is not None:
            self.retry = self.loop.call_later(RECONNECT_S, self._retry)

    def _retry(self) -> None:
        self.retry = None
        if self.waiting:
            self._start()

    def _close(self) -> None:
        if self.retry is not None:
            self.retry.cancel()
            self.retry = None
        if self.connection is None:
            return
        with contextlib.suppress(Exception):  # the loop or the socket may be gone already
            if self.loop is not None and not self.loop.is_closed():
                self.loop.remove_reader(self.connection.fileno())
        with contextlib.suppress(psycopg2.Error):
            self.connection.close()
        self.connection = None


watch = AccessWatch()
