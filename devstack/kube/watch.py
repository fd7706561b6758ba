"""Watch streams of the Kubernetes API emulator (a development stand-in): chunked JSON lines
``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}`` served from the store's
bounded change history, with selector transitions, bookmarks and ``timeoutSeconds``."""

from __future__ import annotations

import json
import time
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


def stream_watch(
    handler: Handler,
    ctx: ServerContext,
    rt: ResourceType,
    namespace: str | None,
    params: dict[str, str],
) -> None:
    store = ctx.api.store
    matcher = make_filter(rt.plural, params.get("labelSelector"), params.get("fieldSelector"))
    try:
        timeout = float(params.get("timeoutSeconds") or ctx.max_watch_s)
    except ValueError as exc:
        raise ApiError(400, "BadRequest", "timeoutSeconds must be a number") from exc
    timeout = min(max(timeout, 0.0), ctx.max_watch_s)
    bookmarks = params.get("allowWatchBookmarks", "").lower() in ("true", "1")
    send_initial = params.get("sendInitialEvents", "").lower() == "true"
    requested = params.get("resourceVersion") or ""
    start_rv = parse_rv(requested) if requested not in ("", "0") else None
    stream = _Stream(handler, rt, params)
    stream.start()
    with store.lock:
        initial: list[Obj] = []
        expired: ApiError | None = None
        if start_rv is None or send_initial:
            initial = [o for o in store.items(rt, namespace) if matcher(o)]
            last = store.resource_version
        else:
            last = start_rv
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
    if send_initial and bookmarks:
        stream.bookmark(last, {"k8s.io/initial-events-end": "true"})
    deadline = time.monotonic() + timeout
    next_bookmark = time.monotonic() + ctx.bookmark_interval_s
    while not store.closed:
        now = time.monotonic()
        if now >= deadline:
            break
        try:
            changes = store.changes_after(last)
        except ApiError as exc:  # fell out of the history while waiting
            stream.send("ERROR", exc.status())
            break
        for change in changes:
            last = change.rv
            if change.resource != rt.key:
                continue
            kind = _classify(change, namespace, matcher)
            if kind is not None:
                stream.send(kind, change.obj)
        if bookmarks and now >= next_bookmark:
            stream.bookmark(last)
            next_bookmark = now + ctx.bookmark_interval_s
        if not changes:
            store.wait_for_change(last, min(deadline - now, 0.25))
    else:
        stream.end()
        return
    if bookmarks and not store.closed:
        stream.bookmark(last)
    stream.end()
