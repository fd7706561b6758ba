"""The one seam through which a service starts a task: by the task's name, once the current
transaction commits. A service never imports a tasks module (tasks import services), so this
is what keeps imports pointing one way; sending after commit means a worker never reads a row
that is not there yet, and a rolled-back write starts nothing."""

import functools
import logging
import threading
from typing import Any

from django.db import transaction
from kombu.exceptions import OperationalError

# The platform's Celery app itself, not celery.current_app: that one is per thread and falls
# back to an empty default app in threads Celery did not start (a web server's workers).
from starverse.celery import app

logger = logging.getLogger(__name__)


_loading = threading.Lock()
_loaded = threading.Event()


def _load_task_modules() -> None:
    """Import every app's tasks module, as a worker does; after that the registry knows each
    name. Under a lock: threads that ask while another is importing wait for it to finish
    rather than look in a half-filled registry."""
    with _loading:
        if not _loaded.is_set():
            app.loader.import_default_modules()
            _loaded.set()


def send(task: str, *args: Any, countdown: float | None = None) -> None:
    """Send a task now (through the registry, so eager mode in tests runs it in-process), to
    start at once or `countdown` seconds from now."""
    registered = app.tasks.get(task)
    if registered is None:
        _load_task_modules()
        registered = app.tasks.get(task)
    if registered is None:
        raise LookupError(f"no task named {task}")
    if countdown is None:
        registered.delay(*args)
    else:
        registered.apply_async(args, countdown=countdown)


def _send_after_commit(task: str, args: tuple[Any, ...], countdown: float | None) -> None:
    """Send, or say why not: the write that asked for the task has committed, so a broker that
    is down must not turn the caller's answer into an error. The desired state is in the
    database, and the loops that converge it (reconcile, the queue, the retry of Stripe
    events) send the work again."""
    try:
        send(task, *args, countdown=countdown)
    except OperationalError as error:
        logger.error("task.unsent task=%s args=%s error=%s", task, args, error)


def enqueue_on_commit(task: str, *args: Any, countdown: float | None = None) -> None:
    """Send `task` with `args` (ids, never rows) after the current transaction commits (at once
    outside one); a `countdown` makes the worker wait that many seconds before starting it."""
    transaction.on_commit(functools.partial(_send_after_commit, task, args, countdown))
