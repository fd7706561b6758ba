"""Console pages for inference endpoints: the list, the "Serve this" form, an endpoint's page
(URL, keys, engine command, replicas, cold start, charts, cost) and its actions. They show an
endpoint as the API does (endpoints.selectors.endpoint_view) and change things only through
endpoints.services. A change to a team's endpoint is for whoever created it, an owner or an
admin (starverse.core.console.run_change), and every change is written to the team's audit
log, as the API's are."""

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from billing.selectors import wallet_for_tenant
from compute.choices import OfferingKind
from compute.models import Offering
from endpoints.choices import EndpointStatus, Engine, SourceKind
from endpoints.engines import OPTIONS
from endpoints.metrics import endpoint_metrics
from endpoints.models import Endpoint
from endpoints.selectors import (
    cold_start_estimates,
    endpoint_keys,
    endpoint_view,
    endpoints_live,
    source_choices,
)
from endpoints.services import (
    endpoint_change,
    endpoint_create,
    endpoint_delete,
    key_create,
    key_revoke,
)
from starverse.accounts.audit import audit_request
from starverse.core.console import page_user, run_change
from starverse.core.errors import ServiceError
from starverse.core.tenancy import get_for_user

TRANSIENT = (EndpointStatus.PROVISIONING, EndpointStatus.UPDATING, EndpointStatus.DELETING)


def _own(request: HttpRequest, pk: str) -> Endpoint:
    return get_for_user(Endpoint.objects.select_related("offering"), request.user, "tenant", pk)


@login_required
def endpoint_list(request: HttpRequest) -> HttpResponse:
    user = page_user(request)
    rows = [endpoint_view(e) for e in endpoints_live(user.tenant_id)]
    context = {
        "active": "endpoints",
        "rows": rows,
        "status_labels": dict(EndpointStatus.choices),
        "engine_labels": dict(Engine.choices),
    }
    return render(request, "endpoints/list.html", context)


# The number typed, or the text itself for the service to refuse in its own words: Any.
def _number(value: str, default: int) -> Any:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default if value in (None, "") else value


def _options(request: HttpRequest, engine: str) -> dict[str, Any]:
    """The form's engine options: the fields the engine knows, filled in ones only."""
    found: dict[str, Any] = {}
    for key in OPTIONS.get(engine, {}):
        # each engine's fields are named for it (opt_vllm_dtype), so both may be on the page
        raw = request.POST.get(f"opt_{engine}_{key}", request.POST.get(f"opt_{key}", "")).strip()
        if not raw:
            continue
        try:
            found[key] = float(raw) if "." in raw else int(raw)
        except ValueError:
            found[key] = raw
    return found


def _picked(values: dict[str, str], picked: str) -> None:
    """The source picked in the form's list (`disk:<id>`, `nas`, `dataset:<id>`) as the
    fields the view reads (source_kind and disk or dataset)."""
    kind, _sep, pk = picked.partition(":")
    if kind in ("disk", "nas", "dataset"):
        values["source_kind"] = kind
        if kind != "nas":
            values[kind] = pk


@login_required
def endpoint_new(request: HttpRequest) -> HttpResponse:
    """ "Serve this": from a disk (?disk=), the NAS or a public-pool model (?dataset=)."""
    user = page_user(request)
    offerings = Offering.objects.filter(
        active=True, kind=OfferingKind.CLOUD, gpu_count__in=(1, 2, 4, 8)
    ).select_related("gpu_model")
    values = {
        "name": "",
        "source_kind": "dataset" if request.GET.get("dataset") else "disk",
        "disk": request.GET.get("disk", ""),
        "path": "",
        "nas_path": "",
        "dataset": request.GET.get("dataset", ""),
        "engine": Engine.VLLM,
        "offering": "",
        "min_replicas": "0",
        "max_replicas": "1",
    }
    if request.method == "POST":
        values.update({k: request.POST.get(k, "").strip() for k in values})
        _picked(values, request.POST.get("source", "").strip())
        kind = values["source_kind"]
        source: dict[str, Any] = (
            {"disk": values["disk"], "path": values["path"]}
            if kind == "disk"
            else {"nas_path": values["nas_path"]}
            if kind == "nas"
            else {"dataset": values["dataset"]}
        )
        try:
            endpoint, _created = endpoint_create(
                user=user,
                name=values["name"],
                source=source,
                engine=values["engine"],
                offering_id=values["offering"],
                min_replicas=_number(values["min_replicas"], 1),
                max_replicas=_number(values["max_replicas"], 1),
                engine_options=_options(request, values["engine"]),
            )
        except ServiceError as error:
            field = getattr(error, "field", "")
            messages.error(request, f"{field}: {error.message}" if field else error.message)
        else:
            if _created:
                audit_request(
                    request,
                    "endpoint.created",
                    endpoint,
                    name=endpoint.name,
                    offering=endpoint.offering_id,
                )
            messages.success(request, _("Endpoint %(name)s is starting.") % {"name": endpoint.name})
            return redirect("endpoints:detail", pk=endpoint.pk)
    return _new_page(request, user, offerings, values)


def _new_page(
    request: HttpRequest, user: Any, offerings: Any, values: dict[str, str]
) -> HttpResponse:
    """The Serve a model form: the sources the user may serve, and the wallet that will pay."""
    sources = source_choices(user)
    picked = (
        "nas"
        if values["source_kind"] == "nas"
        else f"{values['source_kind']}:{values[values['source_kind']]}"
    )
    context = {
        "active": "endpoints",
        "offerings": offerings,
        "engines": Engine.choices,
        "options": OPTIONS,
        "posted": request.POST if request.method == "POST" else {},
        "values": values,
        "wallet": wallet_for_tenant(request.user.tenant_id),  # type: ignore[union-attr]
        "sources": sources,
        "picked": picked if any(s.value == picked for s in sources) else "",
        "source_kinds": SourceKind.choices,
        "cold_start": cold_start_estimates(),
        "cold_start_timeout_s": settings.ENDPOINT_COLD_START_TIMEOUT_S,
    }
    return render(request, "endpoints/new.html", context)


@login_required
def endpoint_detail(request: HttpRequest, pk: str) -> HttpResponse:
    endpoint = _own(request, pk)
    series = endpoint_metrics(endpoint)
    context = {
        "active": "endpoints",
        "endpoint": endpoint_view(endpoint),
        "status_label": endpoint.get_status_display(),
        "keys": list(endpoint_keys(endpoint)),
        "new_key": request.session.pop(f"endpoint-key:{endpoint.pk}", None),
        "series": series,
        "series_json": [{**point, "ts": point["ts"].isoformat()} for point in series],
        "tz": timezone.get_current_timezone_name(),
        "transient": endpoint.status in TRANSIENT,
        "cold_start_estimate": cold_start_estimates()[endpoint.engine],
    }
    return render(request, "endpoints/detail.html", context)


@login_required
@require_POST
def endpoint_scale_view(request: HttpRequest, pk: str) -> HttpResponse:
    endpoint = _own(request, pk)
    update = request.POST.get("update") == "1"

    def scale() -> None:
        changed = endpoint_change(
            endpoint=endpoint,
            min_replicas=_number(request.POST.get("min_replicas", ""), endpoint.min_replicas),
            max_replicas=_number(request.POST.get("max_replicas", ""), endpoint.max_replicas),
            update=update,
            actor=page_user(request),
        )
        audit_request(
            request,
            "endpoint.changed",
            changed,
            min_replicas=changed.min_replicas,
            max_replicas=changed.max_replicas,
            update=update,
        )

    run_change(request, endpoint, scale, _("Scaled: the replicas follow now."))
    return redirect("endpoints:detail", pk=endpoint.pk)


@login_required
@require_POST
def endpoint_delete_view(request: HttpRequest, pk: str) -> HttpResponse:
    endpoint = _own(request, pk)
    run_change(
        request,
        endpoint,
        lambda: audit_request(
            request, "endpoint.deleted", endpoint_delete(endpoint=endpoint), name=endpoint.name
        ),
        _("Endpoint deleted."),
    )
    return redirect(reverse("endpoints:list"))


@login_required
@require_POST
def key_create_view(request: HttpRequest, pk: str) -> HttpResponse:
    endpoint = _own(request, pk)

    def create() -> None:
        key, secret = key_create(
            endpoint=endpoint, name=request.POST.get("name", ""), user=page_user(request)
        )
        audit_request(request, "endpoint.key_created", key, endpoint=endpoint.pk, name=key.name)
        # shown once, on the next page only
        request.session[f"endpoint-key:{endpoint.pk}"] = secret

    run_change(request, endpoint, create, _("Key created."))
    return redirect("endpoints:detail", pk=endpoint.pk)


@login_required
@require_POST
def key_revoke_view(request: HttpRequest, pk: str, key_id: str) -> HttpResponse:
    endpoint = _own(request, pk)
    run_change(
        request,
        endpoint,
        lambda: audit_request(
            request,
            "endpoint.key_revoked",
            key_revoke(endpoint=endpoint, key_id=key_id),
            endpoint=endpoint.pk,
        ),
        _("Key revoked."),
    )
    return redirect("endpoints:detail", pk=endpoint.pk)
