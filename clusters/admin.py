from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from clusters.models import Cluster, Preflight, Rank


class RankInline(admin.TabularInline[Rank, Cluster]):
    """The cluster's ranks: which instance is which (a removed one has no number)."""

    model = Rank
    extra = 0
    can_delete = False
    fields = ("index", "instance_link")
    readonly_fields = fields

    @admin.display(description=_("instance"))
    def instance_link(self, row: Rank) -> SafeString:
        """The rank's instance, a link to its page in the Instances list."""
        url = reverse("admin:instances_instance_change", args=[row.instance_id])
        return format_html('<a href="{}">{}</a>', url, row.instance_id)

    def has_add_permission(self, request: HttpRequest, obj: Cluster | None = None) -> bool:
        return False


class PreflightInline(admin.TabularInline[Preflight, Cluster]):
    """The cluster's pre-flight rounds (bus bandwidth in GB/s, as nccl-tests prints busbw)."""

    model = Preflight
    extra = 0
    can_delete = False
    fields = (
        "round",
        "status",
        "busbw_gbps",
        "floor_gbps",
        "bad_nodes",
        "message",
        "started_at",
        "finished_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Cluster | None = None) -> bool:
        return False


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin[Cluster]):
    """Clusters are read here; their ranks are instances (listed inline, each a link to its
    instance in the Instances list)."""

    inlines = [RankInline, PreflightInline]

    list_display = ["id", "name", "tenant", "offering", "node_count", "template", "created_at"]
    list_filter = ["template", "billing"]
    search_fields = ["id", "name", "tenant__id"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Cluster | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Cluster | None = None) -> bool:
        return False
