"""The terminal's ASGI application: `GET /terminal/healthz`, and the WebSocket
`/terminal/<instance>/ws`, bridged to a shell in the instance's container.

The browser's side of the protocol: binary frames are keystrokes (UTF-8 bytes, passed on as
they are); text frames are JSON controls, `{"type": "resize", "cols": …, "rows": …}`. The
server's side: binary frames are the shell's output; text frames are JSON messages for the page,
`{"type": "ready"}` once the shell runs and `{"type": "notice", "level": …, "text": …}` before
the service closes the socket. Close codes in the 4000s say why (docs/user-guide.md "Terminal"):

    4401 not signed in   4404 no such instance (also another tenant's)   4409 not running
    4408 idle too long   4503 the shell could not be started   1000 the shell exited

A WebSocket from a page outside the console's addresses is refused before the handshake.
The handshake's checks are made again during the session, at least every TERMINAL_RECHECK_S
and at once when the person's access changes (terminal.watch): a session whose console
session ended (log-out, new password, deactivation, reset second factor) closes with 4401, one
whose instance they may no longer use with 4404, one whose instance stopped with 4409. However
the browser's side ends (closed, broken, idle), the exec session on the cluster ends with it."""

import asyncio
import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.http import Http404
from django.utils import translation
from django.utils.translation import gettext as _

from instances.terminals import (
    ENDED_ACCESS,
    ENDED_CLOSED,
    ENDED_EXIT,
    ENDED_IDLE,
    InstanceNotRunning,
    TerminalTarget,
    terminal_session_end,
    terminal_session_start,
    terminal_target,
)
from starverse.accounts.models import User
from starverse.core import kube
from terminal.access import origin_allowed, visitor
from terminal.watch import watch

logger = logging.getLogger(__name__)
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PATH = re.compile(r"/terminal/([A-Za-z0-9_-]{1,64})/ws/?")
HEALTH = "/terminal/healthz"
CLOSE_UNAUTHENTICATED, CLOSE_NOT_FOUND, CLOSE_NOT_RUNNING = 4401, 4404, 4409
CLOSE_IDLE, CLOSE_UNAVAILABLE, CLOSE_EXITED = 4408, 4503, 1000
OUTPUT_BUFFER = 64  # output chunks held for a slow browser before the shell's side waits


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
    elif scope["type"] == "http":
        found = scope["path"] == HEALTH
        await send(
            {
                "type": "http.response.start",
                "status": 200 if found else 404,
                "headers": [(b"content-type", b"text/plain; charset=utf-8")],
            }
        )
        await send({"type": "http.response.body", "body": b"ok" if found else b"not found"})
    elif scope["type"] == "websocket":
        await Terminal(scope, receive, send).serve()


async def _db(function: Callable[..., Any], **kwargs: Any) -> Any:
    """A database call off the event loop. A session makes three or four, minutes apart, so
    each has a connection of its own, closed after it (none is left to go stale)."""

    def call() -> Any:
        try:
            return function(**kwargs)
        finally:
            connections.close_all()

    return await sync_to_async(call, thread_sensitive=True)()


def _exec_open(target: TerminalTarget) -> kube.ExecSession:
    """The shell, opened through the API server of the instance's region's cluster."""
    with kube.cluster(target.cluster) if target.cluster else contextlib.nullcontext():
        return kube.exec_open(
            target.namespace, target.pod, container=target.container, command=list(target.command)
        )


class Terminal:
    """One browser WebSocket, from the handshake to the end of its shell."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope, self.receive, self.send = scope, receive, send
        self.headers = {
            key.decode("latin-1").lower(): value.decode("latin-1")
            for key, value in scope.get("headers") or []
        }
        self.accepted = False
        self.user_id, self.instance_id = "", ""

    async def serve(self) -> None:
        if (await self.receive())["type"] != "websocket.connect":
            return
        match = PATH.fullmatch(self.scope["path"])
        origin = self.headers.get("origin")
        if match is None or not origin_allowed(origin):
            logger.warning(
                "terminal.refused reason=%s origin=%s",
                "path" if match is None else "origin",
                json.dumps(origin),
            )
            await self.send({"type": "websocket.close", "code": 1008})  # 403, no handshake
            return
        seen = await _db(visitor, headers=self.headers)
        with translation.override(seen.language):
            await self._serve(match.group(1), seen.user)

    async def _serve(self, instance_id: str, user: "User | None") -> None:
        if user is None:
            await self.refuse(
                CLOSE_UNAUTHENTICATED, _("Log in to the console again, then reconnect.")
            )
            return
        try:
            target = await _db(terminal_target, user=user, instance_id=instance_id)
        except Http404:
            await self.refuse(CLOSE_NOT_FOUND, _("No such instance."))
            return
        except InstanceNotRunning as refused:
            await self.refuse(CLOSE_NOT_RUNNING, refused.message)
            return
        await self.accept()
        self.user_id, self.instance_id = user.pk, instance_id
        try:
            session = await asyncio.to_thread(_exec_open, target)
        except kube.KubeError as error:
            logger.warning("terminal.exec_failed instance=%s error=%s", instance_id, error)
            await self.refuse(
                CLOSE_UNAVAILABLE,
                _(
                    "The shell could not be started (the container may be restarting). "
                    "Try again in a moment."
                ),
            )
            return
        await self._run(target, user.email, session)

    async def _run(self, target: TerminalTarget, email: str, session: kube.ExecSession) -> None:
        opened = time.monotonic()
        bridge = Bridge(self, session)
        reason: str = ENDED_CLOSED
        try:
            await _db(terminal_session_start, instance_id=target.instance_id, user_email=email)
            reason = await bridge.run()
        finally:
            await bridge.close()  # whatever went wrong, the shell in the container ends
            await _db(
                terminal_session_end,
                instance_id=target.instance_id,
                user_email=email,
                seconds=time.monotonic() - opened,
                reason=reason,
            )

    def still_allowed(self) -> tuple[int, str] | None:
        """The handshake's checks again (a database call: run it off the event loop): None
        while the same person's console session lives and they may use the running instance,
        else the close code and what to tell them."""
        seen = visitor(self.headers)
        if seen.user is None or seen.user.pk != self.user_id:
            return CLOSE_UNAUTHENTICATED, _(
                "Your console session has ended. Log in to the console again, then reconnect."
            )
        try:
            terminal_target(user=seen.user, instance_id=self.instance_id)
        except Http404:
            return CLOSE_NOT_FOUND, _("You no longer have access to this instance.")
        except InstanceNotRunning as refused:
            return CLOSE_NOT_RUNNING, refused.message
        return None

    async def accept(self) -> None:
        if not self.accepted:
            await self.send({"type": "websocket.accept"})
            self.accepted = True

    async def message(self, body: dict[str, Any]) -> None:
        await self.send({"type": "websocket.send", "text": json.dumps(body)})

    async def refuse(self, code: int, text: str, *, level: str = "error") -> None:
        """Say why in the terminal, then close with `code`."""
        await self.accept()
        with contextlib.suppress(OSError, RuntimeError):
            await self.message({"type": "notice", "level": level, "text": text})
            await self.send({"type": "websocket.close", "code": code})


class Bridge:
    """Keystrokes to the shell, output to the browser, until one side ends or the user has
    typed nothing for TERMINAL_IDLE_MINUTES; the exec session is closed in every case. Returns
    why it ended. The shell's output is read by a thread (the Kubernetes client blocks)."""

    def __init__(self, terminal: Terminal, session: kube.ExecSession) -> None:
        self.terminal, self.session = terminal, session
        self.output: asyncio.Queue[bytes | None] = asyncio.Queue(OUTPUT_BUFFER)
        self.loop = asyncio.get_running_loop()
        self.reader = threading.Thread(target=self._read, name="terminal-exec", daemon=True)
        self.closed = False

    def _read(self) -> None:
        while True:
            data = self.session.receive()
            try:
                asyncio.run_coroutine_threadsafe(self.output.put(data), self.loop).result()
            except (RuntimeError, asyncio.CancelledError):
                return  # the event loop is gone
            if data is None:
                return

    async def run(self) -> str:
        self.reader.start()
        changed = watch.register(self.terminal.user_id)
        try:
            return await self._pump(changed)
        finally:
            watch.unregister(self.terminal.user_id, changed)

    async def _pump(self, changed: asyncio.Event) -> str:
        idle_s = float(settings.TERMINAL_IDLE_MINUTES) * 60
        recheck_s = float(settings.TERMINAL_RECHECK_S)
        last_input = next_check = time.monotonic()
        next_check += recheck_s
        browser = asyncio.ensure_future(self.terminal.receive())
        output = asyncio.ensure_future(self.output.get())
        notice = asyncio.ensure_future(changed.wait())
        try:
            await self.terminal.message({"type": "ready"})
            while True:
                now = time.monotonic()
                left = last_input + idle_s - now
                if left <= 0:
                    minutes = settings.TERMINAL_IDLE_MINUTES
                    await self.terminal.refuse(
                        CLOSE_IDLE,
                        _("Closed after %(minutes)s minutes without input. Reconnect to go on.")
                        % {"minutes": minutes},
                        level="info",
                    )
                    return ENDED_IDLE
                if notice.done() or now >= next_check:
                    changed.clear()
                    refused = await _db(self.terminal.still_allowed)
                    if refused is not None:
                        await self.terminal.refuse(*refused)
                        return ENDED_ACCESS
                    next_check = time.monotonic() + recheck_s
                    if notice.done():
                        notice = asyncio.ensure_future(changed.wait())
                    continue
                done, _pending = await asyncio.wait(
                    {browser, output, notice},
                    timeout=min(left, next_check - now),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if output in done:
                    data = output.result()
                    if data is None:
                        await self._exited()
                        return ENDED_EXIT
                    await self.terminal.send({"type": "websocket.send", "bytes": data})
                    output = asyncio.ensure_future(self.output.get())
                if browser in done:
                    message = browser.result()
                    if message["type"] == "websocket.disconnect":
                        return ENDED_CLOSED
                    if await self._input(message):
                        last_input = time.monotonic()
                    browser = asyncio.ensure_future(self.terminal.receive())
        except OSError:  # the browser's connection broke while something was being sent
            return ENDED_CLOSED
        finally:
            for task in (browser, output, notice):
                task.cancel()
            await self.close()

    async def _input(self, message: Message) -> bool:
        """Pass a browser message on; True for keystrokes (which keep the session alive)."""
        if message.get("bytes"):
            await asyncio.to_thread(self.session.send, message["bytes"])
            return True
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            control = json.loads(message.get("text") or "")
            if control.get("type") == "resize":
                cols, rows = int(control["cols"]), int(control["rows"])
                if 0 < cols <= 1000 and 0 < rows <= 1000:
                    await asyncio.to_thread(self.session.resize, cols, rows)
        return False

    async def _exited(self) -> None:
        code = self.session.exit_code
        text = (
            _("The shell exited.")
            if code in (0, None)
            else _("The shell exited with status %(code)s.") % {"code": code}
        )
        await self.terminal.refuse(CLOSE_EXITED, text, level="info")

    async def close(self) -> None:
        """End the exec session (once), then let the reader thread finish: its last output is
        dropped, nobody is there to read it."""
        if self.closed:
            return
        self.closed = True
        await asyncio.to_thread(self.session.close)
        deadline = time.monotonic() + 5
        while self.reader.is_alive() and time.monotonic() < deadline:
            while not self.output.empty():
                self.output.get_nowait()
            await asyncio.sleep(0.01)
