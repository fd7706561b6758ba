from django.contrib import admin
from django.http import HttpRequest

from clusters.models import Cluster, Preflight, Rank


class RankInline(admin.TabularInline[Rank, Cluster]):
    """The cluster's ranks: which instance is which (a removed one has no number)."""

    model = Rank
    extra = 0
    can_delete = False
    fields = ("index", "instance")
    readonly_fields = fields

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
