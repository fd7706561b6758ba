"""The console's Webhooks page: the acting account's or team's webhooks (with their latest
deliveries) and notification channels, added, tested, enabled and removed through the same
services as the API (a team's by its owners and admins)."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from events.channels import channel_create, channel_delete, channel_test
from events.choices import ChannelKind, EventType
from events.models import NotificationChannel, Webhook
from events.webhooks import (
    webhook_create,
    webhook_delete,
    webhook_test,
    webhook_update,
)
from starverse.core.errors import ServiceError
from starverse.core.roles import is_manager
from starverse.core.tenancy import get_for_user, scope_to_user

RECENT = 5


def _context(request: HttpRequest, created: Any = None) -> dict[str, Any]:
    hooks = list(scope_to_user(Webhook.objects.all(), request.user, "tenant"))
    for hook in hooks:
        hook.recent = list(hook.deliveries.select_related("event")[:RECENT])  # type: ignore[attr-defined]
    return {
        "webhooks": hooks,
        "channels": scope_to_user(NotificationChannel.objects.all(), request.user, "tenant"),
        "event_types": EventType.choices,
        "channel_kinds": ChannelKind.choices,
        "created": created,
        "may_manage": is_manager(request.user),
        "active": "webhooks",
    }


@login_required
@require_http_methods(["GET", "POST"])
def webhooks_page(request: HttpRequest) -> HttpResponse:
    created = None
    if request.method == "POST":
        try:
            created = _act(request)
        except ServiceError as error:
            messages.error(request, error.message)
        if created is None:
            return redirect("events:webhooks")
    return render(request, "events/webhooks.html", _context(request, created))


def _act(request: HttpRequest) -> Any:
    """One form's act; a new webhook is answered with its secret (shown this once)."""
    user: Any = request.user
    act, data = request.POST.get("act", ""), request.POST
    if act == "add_webhook":
        return webhook_create(
            user=user,
            url=data.get("url", "").strip(),
            events=data.getlist("events"),
            description=data.get("description", "").strip(),
        )
    if act == "add_channel":
        channel_create(
            user=user,
            kind=data.get("kind", ""),
            target=data.get("target", "").strip(),
            secret=data.get("secret", "").strip(),
            events=data.getlist("events") or None,
            language=request.LANGUAGE_CODE,
        )
        messages.success(request, _("The channel was added."))
        return None
    _act_on_one(request, user, act, data.get("id", ""))
    return None


def _act_on_one(request: HttpRequest, user: Any, act: str, pk: str) -> None:
    if act.endswith("_channel"):
        channel = get_for_user(NotificationChannel.objects.all(), user, "tenant", pk)
        if act == "test_channel":
            channel_test(user=user, channel=channel)
            messages.success(request, _("A test notice is on its way."))
        elif act == "delete_channel":
            channel_delete(user=user, channel=channel)
        return
    webhook = get_for_user(Webhook.objects.all(), user, "tenant", pk)
    if act == "test_webhook":
        webhook_test(user=user, webhook=webhook)
        messages.success(request, _("A test event is on its way."))
    elif act == "enable_webhook":
        webhook_update(user=user, webhook=webhook, enabled=True)
    elif act == "disable_webhook":
        webhook_update(user=user, webhook=webhook, enabled=False)
    elif act == "delete_webhook":
        webhook_delete(user=user, webhook=webhook)
