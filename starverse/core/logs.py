"""Structured logs and the request id that ties one request's lines, and the tasks it started,
together. LOG_FORMAT=json writes one JSON object per line (time, level, logger, message,
request_id, user, tenant, and the exception when there is one) for a log collector; `text`
keeps the key=value lines a person reads in `make run`.

The request id comes from the request's X-Request-ID when it is sane (an attacker's header must
not forge log lines: printable, short, no spaces), else a new one; it is echoed in the answer's
header, travels to Celery as a task header (before_task_publish) and is set again in the worker
before the task runs (task_prerun), so a worker's lines carry the id of the request that asked
for the work."""

import json
import logging
import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse

from starverse.core.acting import acting_token_set

if TYPE_CHECKING:  # the core names the user model only for the type checker (import contracts)
    from starverse.accounts.models import User

REQUEST_ID_HEADER = "X-Request-ID"
# The task header that carries it (Celery copies unknown headers onto task.request).
TASK_HEADER = "starverse_request_id"
SANE_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{8,128}")

request_id: ContextVar[str] = ContextVar("request_id", default="")
actor: ContextVar[tuple[str, str]] = ContextVar("actor", default=("", ""))


def new_request_id() -> str:
    return uuid.uuid4().hex


def sane_request_id(value: str | None) -> str | None:
    return value if value and SANE_ID.fullmatch(value) else None


class RequestIdMiddleware:
    """First in the chain: every later line of the request carries its id, and so does the
    answer (X-Request-ID). The user and tenant are added once authentication has run."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        rid = sane_request_id(request.headers.get(REQUEST_ID_HEADER)) or new_request_id()
        # Kept until the response is closed (request_finished), so that Django's own line about
        # a failed request, written after the middleware returns, carries the id too.
        request_id.set(rid)
        actor.set(("", ""))
        acting_token_set("")
        request.request_id = rid  # type: ignore[attr-defined]
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = rid
        return response


def on_request_finished(**_: Any) -> None:
    request_id.set("")
    actor.set(("", ""))
    acting_token_set("")


class ActorMiddleware:
    """After authentication: names the signed-in user and tenant in the request's log lines
    (an API token's user is known only once DRF authenticates, which the API's base view
    records the same way)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            set_actor(user)
        return self.get_response(request)


def set_actor(user: "User") -> None:
    actor.set((str(user.pk), str(user.tenant_id or "")))


class ContextFilter(logging.Filter):
    """Puts the request id, user and tenant on every record (empty outside a request or task)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        record.user_id, record.tenant_id = actor.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line; the message is formatted with its arguments first, so a
    collector indexes the same text a person would read."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", "") or None,
        }
        user_id = getattr(record, "user_id", "")
        if user_id:
            entry["user"] = user_id
            entry["tenant"] = getattr(record, "tenant_id", "") or None
        task = getattr(record, "task_name", None)
        if task:
            entry["task"] = task
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


# --- Celery: the id travels as a task header ---------------------------------------------------


def on_before_task_publish(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """The sending side: the current request's (or task's) id goes with the message."""
    rid = request_id.get()
    if headers is not None and rid:
        headers.setdefault(TASK_HEADER, rid)


_task_tokens: dict[str, tuple[Any, Any]] = {}


def on_task_prerun(task_id: str = "", task: Any = None, **_: Any) -> None:
    """The worker side: the task's lines carry the id of whoever sent it; a task run in the
    sender's thread (eager, in tests) keeps the sender's; else a new one."""
    rid = None
    if task is not None:
        rid = sane_request_id(getattr(task.request, TASK_HEADER, None))
        if rid is None:
            rid = sane_request_id((task.request.headers or {}).get(TASK_HEADER))
    rid = rid or request_id.get() or new_request_id()
    _task_tokens[task_id] = (request_id.set(rid), actor.set(actor.get()))


def on_task_postrun(task_id: str = "", **_: Any) -> None:
    tokens = _task_tokens.pop(task_id, None)
    if tokens is not None:
        request_id.reset(tokens[0])
        actor.reset(tokens[1])
