"""Watch streams of the Kubernetes API emulator (a development stand-in): chunked JSON lines
``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}`` served from the store's
bounded change history, with selector transitions, bookmarks and ``timeoutSeconds``."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ApiError
from .objects import parse_rv
from .resources import ResourceType
from .selectors import make_filter
from .store import Change
from .tables import to_table, wants_table

if TYPE_CHECKING:
    from .server import Handler, ServerContext

Obj = dict[str, Any]


def _classify(change: Change, namespace: str | None, matcher: Any) -> str | None:
    def visible(obj: Obj | None) -> bool:
        if obj is None:
            return False
        if namespace is not None and (obj.get("metadata") or {}).get("namespace") != namespace:
            return False
        return bool(matcher(obj))

    if change.type == "ADDED":
        return "ADDED" if visible(change.obj) else None
    if change.type == "DELETED":
        return "DELETED" if visible(change.obj) else None
    now, before = visible(change.obj), visible(change.prev)
    if now and before:
        return "MODIFIED"
    if now:
        return "ADDED"
    if before:
        return "DELETED"
    return None


class _Stream:
    def __init__(self, handler: Handler, rt: ResourceType, params: dict[str, str]) -> None:
        self.handler = handler
        self.rt = rt
        self.table = wants_table(handler.headers.get("Accept", ""))
        self.include = params.get("includeObject", "Metadata")

    def start(self) -> None:
        handler = self.handler
        handler._code = 200
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("Cache-Control", "no-cache, private")
        handler.end_headers()

    def send(self, kind: str, obj: Obj) -> None:
        if self.table and kind in ("ADDED", "MODIFIED", "DELETED"):
            obj = to_table(
                self.rt,
                [obj],
                self.include,
                {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
            )
        data = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
        self.handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.handler.wfile.flush()

    def bookmark(self, rv: int, annotations: dict[str, str] | None = None) -> None:
        meta: Obj = {"resourceVersion": str(rv)}
        if annotations:
            meta["annotations"] = annotations
        self.send(
            "BOOKMARK", {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": meta}
        )

    def end(self) -> None:
        self.handler.wfile.write(b"0\r\n\r\n")
        self.handler.wfile.flush()


@dataclass(frozen=True)
class _WatchOptions:
    timeout_s: float
    bookmarks: bool
    send_initial: bool
    start_rv: int | None  # None: list what is there now, then follow


def _watch_options(params: dict[str, str], max_watch_s: float) -> _WatchOptions:
    try:
        timeout = float(params.get("timeoutSeconds") or max_watch_s)
    except ValueError as exc:
        raise ApiError(400, "BadRequest", "timeoutSeconds must be a number") from exc
    requested = params.get("resourceVersion") or ""
    return _WatchOptions(
        timeout_s=min(max(timeout, 0.0), max_watch_s),
        bookmarks=params.get("allowWatchBookmarks", "").lower() in ("true", "1"),
        send_initial=params.get("sendInitialEvents", "").lower() == "true",
        start_rv=parse_rv(requested) if requested not in ("", "0") else None,
    )


def stream_watch(
    handler: Handler,
    ctx: ServerContext,
    rt: ResourceType,
    namespace: str | None,
    params: dict[str, str],
) -> None:
    """Send the objects there are (unless the watch starts at a version), then every change
    after, until the timeout, the history running out from under it, or the store closing."""
    store = ctx.api.store
    matcher = make_filter(rt.plural, params.get("labelSelector"), params.get("fieldSelector"))
    options = _watch_options(params, ctx.max_watch_s)
    stream = _Stream(handler, rt, params)
    stream.start()
    with store.lock:
        initial: list[Obj] = []
        expired: ApiError | None = None
        if options.start_rv is None or options.send_initial:
            initial = [o for o in store.items(rt, namespace) if matcher(o)]
            last = store.resource_version
        else:
            last = options.start_rv
            try:
                store.check_not_expired(last)
            except ApiError as exc:
                expired = exc
    if expired is not None:
        stream.send("ERROR", expired.status())
        stream.end()
        return
    for obj in initial:
        stream.send("ADDED", obj)
    if options.send_initial and options.bookmarks:
        stream.bookmark(last, {"k8s.io/initial-events-end": "true"})
    last, store_closed = _follow(stream, ctx, rt, namespace, matcher, last, options)
    if not store_closed and options.bookmarks and not store.closed:
        stream.bookmark(last)
    stream.end()


def _follow(
    stream: _Stream,
    ctx: ServerContext,
    rt: ResourceType,
    namespace: str | None,
    matcher: Any,
    last: int,
    options: _WatchOptions,
) -> tuple[int, bool]:
    """Stream the changes after `last` until the deadline or an expired history (returns the
    last version seen, False) or until the store closes (the version, True)."""
    store = ctx.api.store
    deadline = time.monotonic() + options.timeout_s
    next_bookmark = time.monotonic() + ctx.bookmark_interval_s
    while not store.closed:
        now = time.monotonic()
        if now >= deadline:
            return last, False
        try:
            changes = store.changes_after(last)
        except ApiError as exc:  # fell out of the history while waiting
            stream.send("ERROR", exc.status())
            return last, False
        for change in changes:
            last = change.rv
            if change.resource != rt.key:
                continue
            kind = _classify(change, namespace, matcher)
            if kind is not None:
                stream.send(kind, change.obj)
        if options.bookmarks and now >= next_bookmark:
            stream.bookmark(last)
            next_bookmark = now + ctx.bookmark_interval_s
        if not changes:
            store.wait_for_change(last, min(deadline - now, 0.25))
    return last, True
