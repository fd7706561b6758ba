"""The operator's fleet screens: every node with its state, last report and live GPUs, the
capacity per GPU model, cordon / uncordon / drain with a reason, the review of a node a
cluster's pre-flight check blamed (cordon it, or clear the review), and the health rules."""

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, re_path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from compute.selectors import capacity_by_model
from fleet.models import Gpu, GpuModel, HealthRule, Node, NodeEvent, NodeProfile, Region
from fleet.selectors import latest_samples
from fleet.services import (
    node_cordon,
    node_drain,
    node_review_clear,
    node_review_confirm,
    node_token_issue,
    node_token_revoke,
    node_uncordon,
)
from starverse.core.adminurls import admin_change_url
from starverse.core.console import page_user
from starverse.core.errors import ServiceError

if TYPE_CHECKING:  # a development dependency: the stubs' name for text or lazy text
    from django_stubs_ext import StrOrPromise


class NodeEventInline(admin.TabularInline[NodeEvent, Node]):
    model = NodeEvent
    fields = readonly_fields = ("at", "kind", "code", "gpu", "message")
    extra = 0
    max_num = 0
    can_delete = False
    ordering = ["-at"]


class GpuInline(admin.TabularInline[Gpu, Node]):
    model = Gpu
    fields = readonly_fields = (
        "index",
        "uuid",
        "product",
        "memory_mb",
        "pci_bus_id",
        "nvlink_links",
        "lost_at",
        "last_seen_at",
    )
    extra = 0
    max_num = 0
    can_delete = False


# The operations on a node, each at /admin/fleet/node/<pk>/<operation>/ (NodeAdmin.state_view).
NODE_OPERATIONS = ("cordon", "drain", "uncordon", "token", "reset", "review-cordon", "review-clear")
# The operations that end a node's review, and the service each calls.
REVIEW_OPERATIONS = {"review-cordon": node_review_confirm, "review-clear": node_review_clear}


class ReviewFilter(admin.SimpleListFilter):
    """Nodes up for an operator's review (a cluster's pre-flight check blamed them)."""

    title = _("review")
    parameter_name = "review"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Node]
    ) -> list[tuple[str, "StrOrPromise"]]:
        return [("yes", _("Up for review")), ("no", _("Not up for review"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Node]) -> QuerySet[Node]:
        if self.value() in ("yes", "no"):
            return queryset.filter(review_since__isnull=self.value() == "no")
        return queryset


class ReasonForm(forms.Form):
    reason = forms.CharField(label=_("Reason"), widget=forms.Textarea(attrs={"rows": 2}))


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin[Node]):
    list_display = [
        "name",
        "gpu_product",
        "gpu_count",
        "interconnect",
        "state_badge",
        "last_report",
        "gpus_now",
        "rack",
        "switch",
    ]
    list_filter = ["region", "state", ReviewFilter, "gpu_product", "interconnect", "in_cluster"]
    search_fields = ["name", "rack", "switch", "fabric", "gpus__uuid"]
    readonly_fields = [
        "id",
        "region",
        "state",
        "state_reason",
        "state_changed_at",
        "review_reason",
        "review_since",
        "token_prefix",
        "labels",
        "in_cluster",
        "agent_version",
        "driver_version",
        "cuda_version",
        "last_report_at",
        "created_at",
        "operations",
    ]
    exclude = ["token_hash"]
    inlines = [GpuInline, NodeEventInline]
    change_list_template = "admin/fleet/node/change_list.html"

    class Media:
        # The node list and a node's page fit a 1280 px screen (the per-GPU grid wraps).
        css = {"all": ["css/fleet-admin.css"]}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Node]:
        queryset = super().get_queryset(request).prefetch_related("gpus")
        self._latest = latest_samples(list(Gpu.objects.values_list("pk", flat=True)))
        return queryset

    @admin.display(description=_("State"), ordering="state")
    def state_badge(self, obj: Node) -> str:
        colour = {"ready": "#15803d", "cordoned": "#b45309", "draining": "#b45309"}.get(
            obj.state, "#b91c1c"
        )
        badge = format_html(
            '<b style="color:{}">{}</b><br><small>{}</small>',
            colour,
            obj.get_state_display(),
            obj.state_reason[:80],
        )
        if obj.review_since is None:
            return badge
        return format_html(
            '{}<br><b style="color:#b45309">{}</b><br><small>{}</small>',
            badge,
            _("Up for review"),
            obj.review_reason[:80],
        )

    @admin.display(description=_("Last report"), ordering="last_report_at")
    def last_report(self, obj: Node) -> str:
        if obj.last_report_at is None:
            return "—"
        return _("%(s)d s ago") % {"s": (timezone.now() - obj.last_report_at).total_seconds()}

    @admin.display(description=_("GPUs now (util · °C · W)"))
    def gpus_now(self, obj: Node) -> str:
        """One small fixed-size cell per GPU, four to a row (static/css/fleet-admin.css), shaded
        by utilisation; hover for temperature and power."""
        latest = getattr(self, "_latest", {})
        cells = []
        for gpu in obj.gpus.all():
            sample = latest.get(gpu.pk)
            if gpu.lost_at:
                cells.append(("is-lost", "", f"GPU {gpu.index}: lost", "✕"))
            elif sample and sample.util is not None:
                shade = int(235 - 1.6 * sample.util)
                tip = (
                    f"GPU {gpu.index}: {sample.util}% · {sample.temp_c} °C · {sample.power_w:.0f} W"
                )
                shading = f"background:rgb({shade},{shade + 10},255)"
                cells.append(("", shading, tip, f"{sample.util}"))
            else:
                cells.append(("is-quiet", "", f"GPU {gpu.index}: no data", "–"))
        if not cells:
            return "—"
        return format_html(
            '<span class="gpu-grid">{}</span>',
            format_html_join(
                "",
                '<span class="gpu-cell {}" style="{}" title="{}">{}</span>',
                ((kind, style, tip, text) for kind, style, tip, text in cells),
            ),
        )

    @admin.display(description=_("Operations"))
    def operations(self, obj: Node) -> str:
        links = [
            (reverse("admin:fleet_node_state", args=[obj.pk, action]), label)
            for action, label in (
                ("cordon", _("Cordon…")),
                ("drain", _("Drain…")),
                ("uncordon", _("Uncordon")),
                ("token", _("New agent token")),
                ("reset", _("Reset agent registration")),
                *(
                    (
                        ("review-cordon", _("Review: cordon it")),
                        ("review-clear", _("Review: nothing wrong")),
                    )
                    if obj.review_since is not None
                    else ()
                ),
            )
        ]
        return format_html_join(" ", '<a class="button" href="{}">{}</a>', links)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra_context = {**(extra_context or {}), "capacity": capacity_by_model()}
        return super().changelist_view(request, extra_context)

    def get_urls(self) -> list[URLPattern]:
        return [
            # Only the operations: a wider pattern would shadow the admin's own
            # <pk>/change/, /delete/ and /history/ pages of a node.
            re_path(
                r"^(?P<pk>[^/]+)/(?P<action>{})/$".format("|".join(NODE_OPERATIONS)),
                self.admin_site.admin_view(self.state_view),
                name="fleet_node_state",
            ),
            *super().get_urls(),
        ]

    def response_add(
        self, request: HttpRequest, obj: Node, post_url_continue: str | None = None
    ) -> HttpResponse:
        token = node_token_issue(node=obj)
        messages.warning(
            request,
            _("Agent token for %(node)s (shown once): %(token)s")
            % {"node": obj.name, "token": token},
        )
        return super().response_add(request, obj, post_url_continue)

    def state_view(self, request: HttpRequest, pk: str, action: str) -> HttpResponse:
        node = get_object_or_404(Node, pk=pk)
        back = HttpResponseRedirect(admin_change_url("fleet_node", node.pk))
        if action == "token" and request.method == "POST":
            messages.warning(
                request,
                _("New agent token for %(node)s (shown once): %(token)s")
                % {"node": node.name, "token": node_token_issue(node=node)},
            )
            return back
        if action == "reset" and request.method == "POST":
            node_token_revoke(node=node)
            messages.warning(
                request,
                _(
                    "The agent token of %(node)s no longer works. Its agent registers again "
                    "with the bootstrap token on its next report and keeps the new token on "
                    "the node."
                )
                % {"node": node.name},
            )
            return back
        if action == "uncordon" and request.method == "POST":
            node_uncordon(node=node, actor=page_user(request))
            return back
        if action in REVIEW_OPERATIONS:
            return self._review_view(request, node, action, back)
        form = ReasonForm(request.POST or None)
        if action in ("cordon", "drain") and request.method == "POST" and form.is_valid():
            try:
                (node_cordon if action == "cordon" else node_drain)(
                    node=node, reason=form.cleaned_data["reason"], actor=page_user(request)
                )
            except ServiceError as error:
                form.add_error(None, error.message)
            else:
                return back
        context = {
            **self.admin_site.each_context(request),
            "title": f"{action}: {node.name}",
            "form": form if action in ("cordon", "drain") else None,
            "object": node,
            "opts": Node._meta,
            "action": action,
        }
        return TemplateResponse(request, "admin/fleet/node/state_form.html", context)

    def _review_view(
        self, request: HttpRequest, node: Node, action: str, back: HttpResponse
    ) -> HttpResponse:
        """End a node's review: cordon it (the operator found the fault the pre-flight check
        reported) or clear it (nothing wrong); asked on a page showing the review's reason."""
        if request.method == "POST":
            if not REVIEW_OPERATIONS[action](node=node, actor=page_user(request)):
                messages.warning(
                    request, _("The node %(node)s is not up for review.") % {"node": node.name}
                )
            return back
        label = _("Cordon") if action == "review-cordon" else _("Clear the review")
        context = {
            **self.admin_site.each_context(request),
            "title": f"{label}: {node.name}",
            "form": None,
            "object": node,
            "opts": Node._meta,
            "action": action,
            "submit": label,
        }
        return TemplateResponse(request, "admin/fleet/node/state_form.html", context)


@admin.register(Region)
class RegionAdmin(admin.ModelAdmin[Region]):
    """A region is a cluster: its kubeconfig is a path in the worker's pod (a mounted Secret),
    never a credential kept in the database the web tier reads."""

    list_display = [
        "name",
        "display_name",
        "display_name_zh_hans",
        "kubeconfig",
        "active",
        "created_at",
    ]
    readonly_fields = ["created_at"]

    def has_delete_permission(self, request: HttpRequest, obj: Region | None = None) -> bool:
        # Nodes, instances and disks keep their region (PROTECT); retire one with `active`.
        return False


@admin.register(HealthRule)
class HealthRuleAdmin(admin.ModelAdmin[HealthRule]):
    list_display = ["name", "kind", "params", "action", "enabled"]
    list_editable = ["enabled"]


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin[GpuModel]):
    list_display = ["id", "name", "product", "memory_gb", "interconnect", "premium"]
    list_editable = ["premium"]


@admin.register(NodeProfile)
class NodeProfileAdmin(admin.ModelAdmin[NodeProfile]):
    """Per node pool: what cluster ranks on those nodes request and get (docs/operator-guide.md,
    node profiles). A change applies to ranks provisioned after it."""

    list_display = ["name", "node_selector", "rdma_resource", "rdma_count", "host_network"]
    fields = [
        "name",
        "node_selector",
        "rdma_resource",
        "rdma_count",
        "networks",
        "host_network",
        "nccl_env",
    ]
