from typing import Any

from django.contrib import admin

from clusters.models import Cluster


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    """Clusters are read here; their ranks are instances (the Instances list, by cluster)."""

    list_display = ["id", "name", "tenant", "offering", "node_count", "template", "created_at"]
    list_filter = ["template", "billing"]
    search_fields = ["id", "name", "tenant__id"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
