"""The operators' catalog of the public pool: what users see under /public and in the API."""

from typing import Any

from django.contrib import admin
from django.db import models
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from datasets.models import PublicDataset
from starverse.core.sizes import format_size


@admin.register(PublicDataset)
class PublicDatasetAdmin(admin.ModelAdmin):
    # a homepage typed without a scheme is https (Django 6's default, chosen now)
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = [
        "name",
        "id",
        "kind",
        "version",
        "size",
        "licence",
        "mount_path",
        "active",
        "sort",
    ]
    list_display_links = ["name"]
    list_filter = ["kind", "active"]
    list_editable = ["active", "sort"]
    search_fields = [
        "id",
        "name",
        "name_zh_hans",
        "description",
        "description_zh_hans",
        "tags",
        "directory",
        "licence",
    ]
    ordering = ["sort", "name"]
    readonly_fields = ["mount_path", "size", "created_at", "updated_at"]
    fieldsets = [
        # the two languages side by side: English, and 简体中文 (blank: the English is shown)
        (
            None,
            {
                "fields": [
                    "id",
                    ("name", "name_zh_hans"),
                    "kind",
                    "version",
                    ("description", "description_zh_hans"),
                    "tags",
                ]
            },
        ),
        (_("Files"), {"fields": ["directory", "mount_path", "size_bytes", "size"]}),
        (_("Terms"), {"fields": [("licence", "licence_zh_hans"), "homepage"]}),
        (_("Listing"), {"fields": ["active", "sort", "created_at", "updated_at"]}),
    ]

    @admin.display(description=_("Size"), ordering="size_bytes")
    def size(self, obj: PublicDataset) -> str:
        return format_size(obj.size_bytes) if obj.size_bytes is not None else "—"

    @admin.display(description=_("Path in instances"))
    def mount_path(self, obj: PublicDataset) -> str:
        return obj.path if obj.kind and obj.directory else "—"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # The id is the API's and the URL's key: changing it would make a new entry.
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "id"] if obj is not None else fields

    def get_prepopulated_fields(self, request: HttpRequest, obj: Any = None) -> dict[str, Any]:
        return {} if obj is not None else {"id": ["name"]}
