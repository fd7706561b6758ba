"""The one seam through which a service starts a task: by the task's name, once the current
transaction commits. A service never imports a tasks module (tasks import services), so this
is what keeps imports pointing one way; sending after commit means a worker never reads a row
that is not there yet, and a rolled-back write starts nothing."""

import functools
import logging
from typing import Any

from celery import current_app
from django.db import transaction

logger = logging.getLogger(__name__)


@functools.cache
def _load_task_modules() -> None:
    # Every app's tasks module, as a worker loads them; after that the registry knows each name.
    current_app.loader.import_default_modules()


def send(task: str, *args: Any, countdown: float | None = None) -> None:
    """Send a task now (through the registry, so eager mode in tests runs it in-process), to
    start at once or `countdown` seconds from now."""
    registered = current_app.tasks.get(task)
    if registered is None:
        _load_task_modules()
        registered = current_app.tasks.get(task)
    if registered is None:
        raise LookupError(f"no task named {task}")
    if countdown is None:
        registered.delay(*args)
    else:
        registered.apply_async(args, countdown=countdown)


def enqueue_on_commit(task: str, *args: Any, countdown: float | None = None) -> None:
    """Send `task` with `args` (ids, never rows) after the current transaction commits (at once
    outside one); a `countdown` makes the worker wait that many seconds before starting it."""
    transaction.on_commit(functools.partial(send, task, *args, countdown=countdown))
