"""The operator's catalog and rental screens: offerings, images, every instance with its
timeline (stop and terminate as actions), and each tenant's limits on ordering."""

from collections.abc import Callable
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from compute.models import Image, Offering, TenantLimits
from compute.placement import misfit
from instances.lifecycle import image_delete, image_save, instance_stop, instance_terminate
from instances.models import (
    AutoStop,
    Instance,
    InstanceEvent,
    MonthlyRental,
    PodWatch,
    StopPolicy,
)
from starverse.accounts.admin import TenantAdmin
from starverse.accounts.models import Tenant
from starverse.core.errors import ServiceError
from starverse.core.money import format_fen

# Never on an operator's screen: the Jupyter token and the private half of the SSH host key.
SECRET_FIELDS = ("jupyter_token", "ssh_host_key")


class OfferingForm(forms.ModelForm[Offering]):
    """Refuses an offering no node of its GPU model could ever run (by GPUs and the node's
    allocatable CPU, memory, local storage and pod slots): it would only ever queue or fail."""

    class Meta:
        model = Offering
        fields = "__all__"  # noqa: DJ007 - the admin edits every field

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        fields = ("gpu_model", "gpu_count", "cpu_cores", "memory_gb", "local_disk_gb", "kind")
        if self.errors or any(cleaned.get(f) is None for f in fields):
            return cleaned
        candidate = Offering(**{f: cleaned[f] for f in fields})
        reason = misfit(candidate)
        if reason:
            raise forms.ValidationError(reason, code="fits_no_node")
        return cleaned


@admin.register(Offering)
class OfferingAdmin(admin.ModelAdmin[Offering]):
    form = OfferingForm
    list_display = [
        "name",
        "name_zh_hans",
        "slug",
        "kind",
        "gpu_model",
        "gpu_count",
        "hourly",
        "monthly",
        "trial",
        "runtime_class",
        "active",
        "sort",
    ]
    list_filter = ["kind", "gpu_model", "active"]
    list_editable = ["active", "sort"]
    search_fields = ["name", "name_zh_hans", "slug"]
    # the two languages side by side: English, and 简体中文 (blank: the English is shown)
    fieldsets = [
        (None, {"fields": [("name", "name_zh_hans"), "slug", "kind", "active", "sort"]}),
        (_("Hardware"), {"fields": ["gpu_model", "gpu_count", "cpu_cores", "memory_gb"]}),
        (None, {"fields": ["local_disk_gb", "system_disk_gb", "runtime_class"]}),
        (
            _("Prices (fen)"),
            {
                "fields": [
                    "price_per_hour_fen",
                    "price_per_month_fen",
                    "trial_price_per_hour_fen",
                    "spot_price_per_hour_fen",
                ]
            },
        ),
        (_("Clusters"), {"fields": ["cluster_one_switch", "preflight_floor_gbps"]}),
    ]

    @admin.display(description=_("Trial per hour"), ordering="trial_price_per_hour_fen")
    def trial(self, obj: Offering) -> str:
        fen = obj.trial_price_per_hour_fen
        return format_fen(fen) if fen is not None else "—"

    @admin.display(description=_("Per hour"), ordering="price_per_hour_fen")
    def hourly(self, obj: Offering) -> str:
        return format_fen(obj.price_per_hour_fen)

    @admin.display(description=_("Per month"), ordering="price_per_month_fen")
    def monthly(self, obj: Offering) -> str:
        return format_fen(obj.price_per_month_fen) if obj.price_per_month_fen else "—"


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin[Image]):
    list_display = [
        "id",
        "name",
        "name_zh_hans",
        "container_image",
        "size",
        "prepull",
        "active",
        "sort",
    ]
    list_editable = ["prepull", "active", "sort"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "id",
                    ("name", "name_zh_hans"),
                    ("description", "description_zh_hans"),
                    "container_image",
                    ("size_bytes", "prepull"),
                    "active",
                    "sort",
                ]
            },
        ),
    ]

    @admin.display(description=_("Size"), ordering="size_bytes")
    def size(self, obj: Image) -> str:
        return f"{obj.size_bytes / 1e9:.1f} GB" if obj.size_bytes else "—"

    def save_model(
        self, request: HttpRequest, obj: Image, form: forms.ModelForm[Image], change: bool
    ) -> None:
        image_save(image=obj)

    def delete_model(self, request: HttpRequest, obj: Image) -> None:
        image_delete(image=obj)


class InstanceEventInline(admin.TabularInline[InstanceEvent, Instance]):
    """The timeline, each step in the operator's language with its words filled in (the row
    keeps the source and its parameters: InstanceEvent.text), a Kubernetes event told as the
    console tells it (instances.timeline) beside what the cluster said."""

    model = InstanceEvent
    fields = readonly_fields = ("at", "status", "said", "reported")
    extra = 0
    max_num = 0
    can_delete = False

    @admin.display(description=_("Message"))
    def said(self, event: InstanceEvent) -> str:
        return event.told

    @admin.display(description=_("As Kubernetes reported it"))
    def reported(self, event: InstanceEvent) -> str:
        return event.text if event.sentence else ""


class _CompanionInline(admin.StackedInline[Any, Instance]):
    """One of the instance's one-to-one rows (instances.models), shown read-only on its page as
    its columns were before they moved: operators change them through the services."""

    extra = 0
    max_num = 0
    can_delete = False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _own_columns(model: type[Model]) -> tuple[str, ...]:
    """A companion row's columns, each shown: every one but the instance it belongs to."""
    return tuple(f.name for f in model._meta.concrete_fields if f.name != "instance")


class MonthlyRentalInline(_CompanionInline):
    model = MonthlyRental
    fields = readonly_fields = _own_columns(MonthlyRental)
    verbose_name = verbose_name_plural = _("Monthly rental")


class StopPolicyInline(_CompanionInline):
    model = StopPolicy
    fields = readonly_fields = _own_columns(StopPolicy)
    verbose_name = verbose_name_plural = _("Automatic stops")


class PodWatchInline(_CompanionInline):
    model = PodWatch
    fields = readonly_fields = _own_columns(PodWatch)
    verbose_name = verbose_name_plural = _("Provisioning")


@admin.register(Instance)
class InstanceAdmin(admin.ModelAdmin[Instance]):
    list_display = ["id", "name", "tenant", "offering", "status", "node", "cost", "created_at"]
    list_filter = ["status", "billing", "offering__gpu_model"]
    search_fields = ["id", "name", "tenant__members__email", "node__name"]
    readonly_fields = [f.name for f in Instance._meta.fields if f.name not in SECRET_FIELDS]
    exclude = list(SECRET_FIELDS)
    inlines = [MonthlyRentalInline, StopPolicyInline, PodWatchInline, InstanceEventInline]
    actions = ["stop", "terminate"]

    def get_inlines(self, request: HttpRequest, obj: Instance | None) -> list[type[Any]]:
        # an instance never billed monthly has no rental to show
        inlines = list(super().get_inlines(request, obj))
        if obj is None or obj.rental is None:
            inlines.remove(MonthlyRentalInline)
        return inlines

    def has_add_permission(self, request: HttpRequest, obj: Instance | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Instance | None = None) -> bool:
        return False

    @admin.display(description=_("Cost so far"), ordering="cost_fen")
    def cost(self, obj: Instance) -> str:
        return format_fen(obj.cost_fen)

    def _act(
        self, request: HttpRequest, queryset: QuerySet[Instance], service: Callable[..., object]
    ) -> None:
        for instance in queryset:
            try:
                service(instance_id=instance.id)
            except ServiceError as error:
                self.message_user(request, f"{instance.id}: {error.message}", messages.ERROR)

    @admin.action(description=_("Stop selected instances (disks kept)"))
    def stop(self, request: HttpRequest, queryset: QuerySet[Instance]) -> None:
        self._act(request, queryset, instance_stop)

    @admin.action(description=_("Terminate selected instances (disks deleted)"))
    def terminate(self, request: HttpRequest, queryset: QuerySet[Instance]) -> None:
        self._act(request, queryset, instance_terminate)


def _limit(value: int | None, default: int) -> str:
    return _("%(value)d (default)") % {"value": default} if value is None else str(value)


@admin.register(AutoStop)
class AutoStopAdmin(admin.ModelAdmin[AutoStop]):
    """The platform's automatic stops (idle, scheduled): a record, never edited."""

    list_display = ("instance", "tenant", "kind", "at", "price_per_hour_fen")
    list_filter = ("kind",)
    search_fields = ("instance__id", "tenant__id")
    date_hierarchy = "at"
    list_select_related = ("instance", "tenant")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AutoStop | None = None) -> bool:
        return False


@admin.register(TenantLimits)
class TenantLimitsAdmin(admin.ModelAdmin[TenantLimits]):
    """An account's own limits on ordering; an empty field is the setting's default."""

    list_display = ["tenant", "queued_orders", "running_gpus", "trial_premium_gpus", "updated_at"]
    search_fields = ["tenant__id", "tenant__name", "tenant__members__email"]
    autocomplete_fields = ["tenant"]
    readonly_fields = ["updated_at"]

    @admin.display(description=_("Queued orders"))
    def queued_orders(self, obj: TenantLimits) -> str:
        return _limit(obj.max_queued_orders, settings.MAX_QUEUED_ORDERS)

    @admin.display(description=_("GPUs held and queued"))
    def running_gpus(self, obj: TenantLimits) -> str:
        return _limit(obj.max_running_gpus, settings.MAX_RUNNING_GPUS)

    @admin.display(description=_("Premium GPUs on trial credit"))
    def trial_premium_gpus(self, obj: TenantLimits) -> str:
        return _limit(obj.trial_max_premium_gpus, settings.TRIAL_MAX_PREMIUM_GPUS)


class TenantLimitsInline(admin.StackedInline[TenantLimits, Tenant]):
    model = TenantLimits
    fields = ["max_queued_orders", "max_running_gpus", "trial_max_premium_gpus", "note"]
    max_num = 1
    extra = 1  # a blank form while the account has none: fill in only what differs


# The tenant's page (an accounts screen) shows its limits, which are the instances app's: the
# app above extends the screen, so accounts never imports instances.
admin.site.unregister(Tenant)


@admin.register(Tenant)
class TenantWithLimitsAdmin(TenantAdmin):
    inlines = [*TenantAdmin.inlines, TenantLimitsInline]
