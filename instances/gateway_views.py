"""Console forms of an instance's gateway addresses (instances.gateway): its HTTP ports and
their share links, on the instance's page. Changes go through the gateway services, only by
who ordered the instance, an owner or an admin (starverse.core.roles), and are audited."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from instances.gateway import (
    JUPYTER_PORT,
    instance_ports_set,
    port_url,
    served_ports,
    share_create,
    share_revoke,
    shares_live,
)
from instances.models import Instance
from starverse.accounts.audit import audit_request
from starverse.core.console import page_user, run_change
from starverse.core.errors import InvalidInput
from starverse.core.tenancy import get_for_user


def gateway_ports(instance: Instance) -> list[dict[str, Any]]:
    """Jupyter's port and the declared ones, each with its address and live share links."""
    shares: dict[int, list[Any]] = {}
    for share in shares_live(instance):
        shares.setdefault(share.port, []).append(share)
    return [
        {
            "port": port,
            "url": port_url(instance.id, port),
            "jupyter": port == JUPYTER_PORT,
            "shares": shares.get(port, []),
        }
        for port in served_ports(instance)
    ]


# A share link is shown once, on the page the owner lands on after making it; it waits in the
# (server-side) session until then, never in a cookie.
NEW_SHARE_KEY = "instances:new_share"


def new_share_take(request: HttpRequest, instance: Instance) -> dict[str, Any] | None:
    found = request.session.get(NEW_SHARE_KEY)
    if not found or found.get("instance") != instance.pk:
        return None
    del request.session[NEW_SHARE_KEY]
    return dict(found)


def _port_posted(request: HttpRequest) -> int:
    try:
        return int(str(request.POST.get("port", "")).strip())
    except ValueError:
        raise InvalidInput(_("Enter a port number between 1 and 65535.")) from None


def _to_ports(instance: Instance) -> HttpResponse:
    return redirect(reverse("instances:detail", args=[instance.pk]) + "#ports")


@login_required
@require_POST
def port_add_view(request: HttpRequest, pk: str) -> HttpResponse:
    instance = get_for_user(Instance.objects.all(), request.user, "tenant", pk)

    def add() -> None:
        port = _port_posted(request)
        changed = instance_ports_set(instance_id=instance.pk, ports=[*instance.ports, port])
        audit_request(request, "instance.ports_changed", changed, ports=changed.ports)

    run_change(request, instance, add, _("Port added: its address works in a few seconds."))
    return _to_ports(instance)


@login_required
@require_POST
def port_remove_view(request: HttpRequest, pk: str, port: int) -> HttpResponse:
    instance = get_for_user(Instance.objects.all(), request.user, "tenant", pk)
    kept = [p for p in instance.ports if p != port]

    def remove() -> None:
        changed = instance_ports_set(instance_id=instance.pk, ports=kept)
        audit_request(request, "instance.ports_changed", changed, ports=changed.ports)

    run_change(
        request,
        instance,
        remove,
        _("Port %(port)s removed; its share links no longer work.") % {"port": port},
    )
    return _to_ports(instance)


@login_required
@require_POST
def share_create_view(request: HttpRequest, pk: str) -> HttpResponse:
    instance = get_for_user(Instance.objects.all(), request.user, "tenant", pk)

    def create() -> None:
        share, url = share_create(
            instance=instance, port=_port_posted(request), user=page_user(request)
        )
        request.session[NEW_SHARE_KEY] = {"instance": instance.pk, "port": share.port, "url": url}
        audit_request(request, "share.created", share, instance=instance.pk, port=share.port)

    run_change(request, instance, create, _("Share link made. Copy it now: it is shown only once."))
    return _to_ports(instance)


@login_required
@require_POST
def share_revoke_view(request: HttpRequest, pk: str, share: str) -> HttpResponse:
    instance = get_for_user(Instance.objects.all(), request.user, "tenant", pk)
    run_change(
        request,
        instance,
        lambda: audit_request(
            request,
            "share.revoked",
            share_revoke(instance=instance, share_id=share),
            instance=instance.pk,
        ),
        _("Share link revoked: it no longer opens the port."),
    )
    return _to_ports(instance)
