from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from jobs.models import Job, JobEvent, JobRank


class JobRankInline(admin.TabularInline[JobRank, Job]):
    model = JobRank
    extra = 0
    can_delete = False
    readonly_fields = ("index", "instance")


class JobEventInline(admin.TabularInline[JobEvent, Job]):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = ("at", "status", "told")
    readonly_fields = ("at", "status", "told")

    @admin.display(description=_("What happened"))
    def told(self, event: JobEvent) -> str:
        return event.text


@admin.register(Job)
class JobAdmin(admin.ModelAdmin[Job]):
    """Jobs, read-only: a job changes through its owner's API and its ranks' lives."""

    list_display = ("id", "name", "tenant", "status", "offering", "restarts", "created_at")
    list_filter = ("status",)
    search_fields = ("id", "name", "tenant__id", "tenant__name")
    readonly_fields = [field.name for field in Job._meta.fields]
    inlines = [JobRankInline, JobEventInline]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False
