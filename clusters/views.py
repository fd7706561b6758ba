"""Console pages for clusters: the list, the order form, a cluster's page and its actions.
They read through clusters.selectors, show a cluster as the API does (ClusterOutput), and
change things only through clusters.services; the look and the order form's token are the
instance pages' (instances.views)."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from billing.models import Wallet
from billing.selectors import wallet_for_tenant
from clusters.api.serializers import ClusterOutput
from clusters.choices import ClusterStatus, Template
from clusters.models import Cluster
from clusters.selectors import (
    ClusterView,
    cluster_events,
    cluster_metrics,
    cluster_view,
    cluster_views,
)
from clusters.services import (
    cluster_order,
    cluster_scale,
    cluster_start,
    cluster_stop,
    cluster_terminate,
)
from compute.admission import ORDER_KEY_PREFIX
from compute.choices import BillingMode, OfferingKind
from compute.models import Image, Offering
from instances.choices import InstanceStatus
from instances.selectors import availability, offering_price_now
from starverse.accounts.audit import audit_request
from starverse.accounts.models import SshKey
from starverse.core.console import form_token, page_user, redirect_back, run_change
from starverse.core.errors import IdempotencyConflict, ServiceError
from starverse.core.tenancy import get_for_user, scope_to_user
from starverse.core.text import localized

C = ClusterStatus
# Which actions a cluster offers in each status (the services refuse the rest anyway).
CAN_STOP = (C.RUNNING, C.PROVISIONING, C.CHECKING)
CAN_START = (C.STOPPED, C.FAILED)
# Statuses that change on their own within seconds: the page watches them closely.
TRANSIENT = (C.QUEUED, C.PROVISIONING, C.CHECKING, C.STOPPING, C.TERMINATING)
# What each launch template gives, for the order form.
TEMPLATE_NOTES: dict[str, Any] = {
    Template.TORCHRUN: gettext_lazy("A torchrun command with the rendezvous on rank 0."),
    Template.DEEPSPEED: gettext_lazy("A deepspeed --hostfile command over every rank."),
    Template.MEGATRON: gettext_lazy(
        "A Megatron-LM command with tensor, pipeline and data parallel degrees filled in."
    ),
    Template.COLOSSALAI: gettext_lazy("A colossalai run command over every rank."),
    Template.NONE: gettext_lazy("Only the environment and hostfiles; launch it your way."),
}


class ClusterForm(forms.Form):
    offering = forms.ChoiceField(
        error_messages={
            "required": gettext_lazy("Choose a whole-node offering."),
            "invalid_choice": gettext_lazy(
                "That offering is not available for clusters; choose another."
            ),
        }
    )
    # The most nodes (CLUSTER_MAX_NODES, and what the fleet has) is the service's to refuse.
    node_count = forms.IntegerField(
        min_value=2,
        error_messages={
            "required": gettext_lazy("Choose how many nodes."),
            "invalid": gettext_lazy("The node count is a whole number."),
            "min_value": gettext_lazy("A cluster has at least 2 nodes."),
        },
    )
    image = forms.ChoiceField(
        error_messages={
            "required": gettext_lazy("Choose an image."),
            "invalid_choice": gettext_lazy("That image is no longer available; choose another."),
        }
    )
    # Megatron-LM degrees of the launch script; whether they split the cluster's GPUs is the
    # service's to refuse (clusters.services._degrees_valid), as for the API's `parallelism`.
    tensor_parallel = forms.IntegerField(
        required=False,
        min_value=1,
        error_messages={
            "invalid": gettext_lazy("The tensor parallel size is a whole number."),
            "min_value": gettext_lazy("The tensor parallel size is at least 1."),
        },
    )
    pipeline_parallel = forms.IntegerField(
        required=False,
        min_value=1,
        error_messages={
            "invalid": gettext_lazy("The pipeline parallel size is a whole number."),
            "min_value": gettext_lazy("The pipeline parallel size is at least 1."),
        },
    )
    template = forms.ChoiceField(choices=Template.choices, initial=Template.TORCHRUN)
    billing = forms.ChoiceField(choices=BillingMode.choices, initial=BillingMode.HOURLY)
    name = forms.CharField(max_length=90, required=False, strip=True)
    ssh_keys = forms.MultipleChoiceField(required=False)
    token = forms.RegexField(regex=r"^[A-Za-z0-9_-]{16,64}$")

    def __init__(
        self,
        *args: Any,
        offerings: list[Offering],
        images: list[Image],
        keys: list[SshKey],
        **kw: Any,
    ) -> None:
        super().__init__(*args, **kw)
        self._offer("offering", [(o.id, localized(o, "name")) for o in offerings])
        self._offer("image", [(i.id, localized(i, "name")) for i in images])
        self._offer("ssh_keys", [(k.id, k.name) for k in keys])

    def _offer(self, name: str, choices: list[tuple[str, str]]) -> None:
        found = self.fields[name]
        assert isinstance(found, forms.ChoiceField)  # the choice fields declared above
        found.choices = choices

    def parallelism(self) -> dict[str, int] | None:
        """The degrees as the API's `parallelism` takes them: none (the launch script's
        default), or the tensor size and the pipeline size (1 when empty)."""
        tensor = self.cleaned_data.get("tensor_parallel")
        pipeline = self.cleaned_data.get("pipeline_parallel")
        if tensor is None:
            return None
        return {"tensor": tensor, "pipeline": pipeline or 1}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("pipeline_parallel") is not None and data.get("tensor_parallel") is None:
            # the API's `parallelism` needs its tensor size too
            self.add_error(
                "tensor_parallel",
                _("Enter the tensor parallel size with the pipeline parallel size."),
            )
        return data


@dataclass
class _Offer:
    """What the order form offers: the active whole-node offerings with the nodes free now,
    and the user's balance and SSH keys."""

    offerings: list[Offering]
    images: list[Image]
    wallet: Wallet
    counts: dict[str, int]
    keys: list[SshKey]


@dataclass
class _Shown:
    """The order form as the page shows it: the choices, the order token (the idempotency
    key of the order it places), and why the last submission was refused, if it was."""

    chosen: dict[str, str]
    token: str
    selected_keys: list[str] = field(default_factory=list)
    error: str | None = None
    error_code: str = ""
    http_status: int = 200

    def refuse(self, error: str, *, status: int, code: str = "", new_token: bool = False) -> None:
        self.error, self.error_code, self.http_status = error, code, status
        if new_token:
            self.token = form_token()


def _offer_for(request: HttpRequest) -> _Offer:
    offerings = list(
        Offering.objects.filter(active=True, kind=OfferingKind.BARE_METAL).select_related(
            "gpu_model"
        )
    )
    return _Offer(
        offerings=offerings,
        images=list(Image.objects.usable_by(request.user.tenant_id)),  # type: ignore[union-attr]
        wallet=wallet_for_tenant(request.user.tenant_id),  # type: ignore[union-attr]
        counts=availability(offerings),
        keys=list(scope_to_user(SshKey.objects.all(), request.user, "user")),
    )


def _default_offering(offer: _Offer) -> str:
    """The cheapest whole-node offering with two nodes free now (else the cheapest with any,
    else the first): a first choice that can be placed at once."""
    by_price = sorted(offer.offerings, key=lambda o: o.price_per_hour_fen)
    for least in (2, 1):
        found = [o for o in by_price if offer.counts.get(o.id, 0) >= least]
        if found:
            return found[0].id
    return by_price[0].id if by_price else ""


def _form_new(request: HttpRequest, offer: _Offer) -> _Shown:
    """A blank form: the offering asked for (?offering=) or a safe default, the nodes and
    parallel sizes asked for (the planner's order link) or two nodes and the default sizes,
    the first image, the torchrun template, hourly billing, every SSH key, and a new token."""
    wanted = request.GET.get("offering", "")
    asked = {
        key: str(request.GET.get(key, ""))
        for key in ("node_count", "tensor_parallel", "pipeline_parallel")
        if str(request.GET.get(key, "")).isdigit()
    }
    return _Shown(
        chosen={
            "offering": wanted
            if any(o.id == wanted for o in offer.offerings)
            else _default_offering(offer),
            "node_count": asked.get("node_count", "2"),
            "tensor_parallel": asked.get("tensor_parallel", ""),
            "pipeline_parallel": asked.get("pipeline_parallel", ""),
            "image": offer.images[0].id if offer.images else "",
            "template": Template.TORCHRUN,
            "billing": BillingMode.HOURLY,
            "name": "",
        },
        token=form_token(),
        selected_keys=[k.id for k in offer.keys],
    )


def _form_as_posted(request: HttpRequest) -> _Shown:
    """The submitted form, to show again as it was sent."""
    return _Shown(
        chosen={
            key: str(request.POST.get(key, ""))[:100]
            for key in (
                "offering",
                "node_count",
                "tensor_parallel",
                "pipeline_parallel",
                "image",
                "template",
                "billing",
                "name",
            )
        },
        token=str(request.POST.get("token", "")),
        selected_keys=request.POST.getlist("ssh_keys"),
    )


@login_required
def cluster_new(request: HttpRequest) -> HttpResponse:
    """Order a cluster. A submitted form places its order once (a second submission of it
    finds the same cluster) and leads to the cluster; a refused one comes back with the reason
    and the choices kept."""
    offer = _offer_for(request)
    if request.method != "POST":
        return _order_page(request, offer, _form_new(request, offer))
    form = ClusterForm(
        request.POST, offerings=offer.offerings, images=offer.images, keys=offer.keys
    )
    shown = _form_as_posted(request)
    if not form.is_valid():
        errors = " ".join(str(e) for errs in form.errors.values() for e in errs)
        shown.refuse(errors, status=400, new_token="token" in form.errors)
        return _order_page(request, offer, shown)
    data = form.cleaned_data
    try:
        cluster, created = cluster_order(
            user=page_user(request),
            offering_id=data["offering"],
            image_id=data["image"],
            node_count=data["node_count"],
            template=data["template"],
            name=data["name"],
            billing=data["billing"],
            ssh_keys=data["ssh_keys"],
            parallelism=form.parallelism(),
            idempotency_key=ORDER_KEY_PREFIX + data["token"],
        )
    except IdempotencyConflict as conflict:
        # A stale copy of a form that already placed a different order.
        message = _(
            "This form was already used to place a different order. Check your "
            "clusters, then submit again if you still want this one."
        )
        shown.refuse(message, status=conflict.status_code, new_token=True)
    except ServiceError as failure:
        # Nothing was ordered: the same token stays valid for the corrected order.
        shown.refuse(failure.message, status=failure.status_code, code=failure.code)
    else:
        if created:
            audit_request(request, "cluster.ordered", cluster, nodes=data["node_count"])
            messages.success(request, _("Cluster “%(name)s” ordered.") % {"name": cluster.name})
        else:
            messages.info(request, _("This order had already been placed; here is its cluster."))
        return redirect("clusters:detail", cluster.pk)
    return _order_page(request, offer, shown)


def _order_page(request: HttpRequest, offer: _Offer, shown: _Shown) -> HttpResponse:
    # a node's hour as charged now (pay as you go: at the trial price while trial credit pays)
    now_of = {o.id: offering_price_now(o, offer.wallet.promo_free_fen) for o in offer.offerings}
    catalog = {
        o.id: {
            "name": localized(o, "name"),
            "hour": o.price_per_hour_fen,
            "now": now_of[o.id].fen,
            "after": now_of[o.id].after_fen,
            "month": o.price_per_month_fen,
            "available": offer.counts.get(o.id, 0),
        }
        for o in offer.offerings
    }
    try:
        nodes = int(shown.chosen.get("node_count") or 2)
    except ValueError:
        nodes = 2
    selected = next((o for o in offer.offerings if o.id == shown.chosen["offering"]), None)
    context = {
        "active": "clusters",
        "offerings": offer.offerings,
        "counts": offer.counts,
        "images": offer.images,
        "keys": offer.keys,
        "selected_keys": shown.selected_keys,
        "templates": [(value, label, TEMPLATE_NOTES[value]) for value, label in Template.choices],
        "wallet": offer.wallet,
        "chosen": shown.chosen,
        "nodes": max(nodes, 2),
        "max_nodes": settings.CLUSTER_MAX_NODES,
        "selected": selected,
        "catalog": catalog,
        "now_of": now_of,
        "token": shown.token,
        "error": shown.error,
        "error_code": shown.error_code,
    }
    return render(request, "clusters/new.html", context, status=shown.http_status)


def _status_labels() -> dict[str, str]:
    return {value: str(label) for value, label in ClusterStatus.choices}


def _user_clusters(request: HttpRequest) -> QuerySet[Cluster]:
    return scope_to_user(Cluster.objects.filter(owner=""), request.user, "tenant").select_related(
        "offering__gpu_model", "image"
    )


@login_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    """The tenant's clusters, newest first, each with its ranks' aggregate."""
    page = Paginator(_user_clusters(request).order_by("-created_at"), 50).get_page(
        request.GET.get("page")
    )
    return render(
        request,
        "clusters/list.html",
        {
            "active": "clusters",
            "page": page,
            "rows": cluster_views(list(page.object_list)),
            "status_labels": _status_labels(),
        },
    )


def _metrics_json(cluster: Cluster) -> list[dict[str, Any]]:
    """cluster_metrics with times as ISO text, as the metrics API returns them."""
    return [
        {
            "rank": rank["rank"],
            "gpus": [
                {**gpu, "samples": [{**s, "at": s["at"].isoformat()} for s in gpu["samples"]]}
                for gpu in rank["gpus"]
            ],
        }
        for rank in cluster_metrics(cluster)
    ]


@login_required
def cluster_detail(request: HttpRequest, pk: str) -> HttpResponse:
    cluster = get_for_user(_user_clusters(request), request.user, "tenant", pk)
    return render(request, "clusters/detail.html", detail_context(cluster, cluster_view(cluster)))


def detail_context(cluster: Cluster, view: ClusterView) -> dict[str, Any]:
    """What a cluster's page shows: the cluster as the API answers it (ClusterOutput: ranks,
    `launch`, `preflight`, cost, queue position), every rank's events and GPU samples, and the
    actions its status allows."""
    status = view.status
    return {
        "active": "clusters",
        "cluster": cluster,
        "info": ClusterOutput(view).data,
        "region": next((rank.region for rank in view.ranks if rank.region_id), None),
        "status": status,
        "events": cluster_events(cluster),
        "metrics": _metrics_json(cluster),
        "status_labels": _status_labels(),
        "rank_labels": {value: str(label) for value, label in InstanceStatus.choices},
        "can_stop": status in CAN_STOP,
        "can_start": status in CAN_START,
        "can_scale": status == C.STOPPED,
        "max_nodes": settings.CLUSTER_MAX_NODES,
        "can_terminate": status not in (C.TERMINATING, C.TERMINATED),
        "transient": status in TRANSIENT,
        "tz": timezone.get_current_timezone_name(),
    }


def _back(request: HttpRequest, cluster: Cluster) -> HttpResponse:
    """Back to where the action was taken (the list or the cluster's page)."""
    return redirect_back(request, reverse("clusters:detail", args=[cluster.pk]))


def _act(
    request: HttpRequest, pk: str, service: Callable[..., Cluster], done: str, audited: str
) -> HttpResponse:
    """Run the change; `audited` names it in the team's audit log when it is done."""
    cluster = get_for_user(Cluster.objects.filter(owner=""), request.user, "tenant", pk)
    run_change(
        request,
        cluster,
        lambda: audit_request(request, audited, service(cluster=cluster)),
        done % {"name": cluster.name},
    )
    return _back(request, cluster)


@login_required
@require_POST
def cluster_stop_view(request: HttpRequest, pk: str) -> HttpResponse:
    return _act(
        request,
        pk,
        cluster_stop,
        _("Stopping “%(name)s”: billing has stopped for every node, the disks are kept."),
        "cluster.stopped",
    )


@login_required
@require_POST
def cluster_start_view(request: HttpRequest, pk: str) -> HttpResponse:
    return _act(
        request,
        pk,
        cluster_start,
        _("Starting “%(name)s”: every node together."),
        "cluster.started",
    )


@login_required
@require_POST
def cluster_terminate_view(request: HttpRequest, pk: str) -> HttpResponse:
    return _act(
        request,
        pk,
        cluster_terminate,
        _("Terminating “%(name)s”: every node and its disk are being deleted."),
        "cluster.terminated",
    )


class ScaleForm(forms.Form):
    node_count = forms.IntegerField()
    keep_disks = forms.BooleanField(required=False)


@login_required
@require_POST
def cluster_scale_view(request: HttpRequest, pk: str) -> HttpResponse:
    """Scale a stopped cluster (clusters.services.cluster_scale); the bounds and the state are
    the service's to check, its refusal flashed."""
    cluster = get_for_user(Cluster.objects.filter(owner=""), request.user, "tenant", pk)
    form = ScaleForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("Enter the number of nodes as a whole number."))
        return _back(request, cluster)
    data = form.cleaned_data
    run_change(
        request,
        cluster,
        lambda: audit_request(
            request,
            "cluster.scaled",
            cluster_scale(
                cluster=cluster,
                node_count=data["node_count"],
                user=page_user(request),
                keep_disks=data["keep_disks"],
            )[0],
            nodes=data["node_count"],
        ),
        _("“%(name)s” now has %(count)d nodes; start it to run them all.")
        % {"name": cluster.name, "count": data["node_count"]},
    )
    return _back(request, cluster)
