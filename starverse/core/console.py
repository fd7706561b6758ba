"""What every console form handler does: call a service, then say on the next page what
happened or, in the service's own words, why not."""

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest

from starverse.core.errors import ServiceError


def run_service(request: HttpRequest, action: Callable[[], Any], done: str) -> bool:
    """Run `action`; flash `done` on success or the service's message on refusal. Returns
    whether it succeeded."""
    try:
        action()
    except ServiceError as error:
        messages.error(request, error.message)
        return False
    messages.success(request, done)
    return True
