"""Console pages for storage: the Disks page (cloud disks, the shared NAS, the countdown of unpaid
storage) and the attach / detach forms of an instance's page. They change things only through
instances.disks and datasets.shared_storage, so the console and the API follow the same rules."""

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from datasets.shared_storage import nas_delete, nas_for_tenant, nas_set_size
from instances.choices import DiskStatus, InstanceStatus
from instances.disks import disk_attach, disk_create, disk_delete, disk_detach, disk_resize
from instances.models import Disk, Instance
from instances.storage import days_left, open_arrears, prices, storage_day_fen
from starverse.core.errors import ServiceError
from starverse.core.tenancy import get_for_user, scope_to_user


class SizeForm(forms.Form):
    size_gb = forms.IntegerField(min_value=1)


class DiskForm(SizeForm):
    name = forms.CharField(max_length=63)


def _form_error(form: forms.Form) -> str:
    return " ".join(str(e) for errors in form.errors.values() for e in errors)


def _run(request: HttpRequest, action: Any, done: str) -> None:
    """Call a service; say what happened, or why not, on the next page."""
    try:
        action()
    except ServiceError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, done)


def tenant_disks(request: HttpRequest) -> Any:
    return scope_to_user(Disk.objects.all(), request.user, "tenant").exclude(
        status=DiskStatus.DELETED
    )


def free_disks(request: HttpRequest) -> list[Disk]:
    """The user's disks that can be attached now: not attached, not being deleted."""
    return list(
        tenant_disks(request)
        .filter(status__in=(DiskStatus.CREATING, DiskStatus.AVAILABLE))
        .order_by("name")
    )


@login_required
def disk_list(request: HttpRequest) -> HttpResponse:
    tenant_id = request.user.tenant_id  # type: ignore[union-attr]
    disks = list(tenant_disks(request).select_related("instance").order_by("name"))
    arrears = open_arrears(tenant_id)
    price = prices()
    nas = nas_for_tenant(tenant_id)
    stopped = scope_to_user(Instance.objects.all(), request.user, "tenant").filter(
        status__in=(InstanceStatus.STOPPED, InstanceStatus.FAILED, InstanceStatus.QUEUED)
    )
    return render(
        request,
        "instances/disks.html",
        {
            "active": "disks",
            "disks": disks,
            "nas": nas,
            "arrears": arrears,
            "days_left": days_left(arrears, timezone.now()) if arrears else None,
            "disk_price": price.get("disk", 0),
            "nas_price": price.get("nas", 0),
            "day_total_fen": storage_day_fen(tenant_id),
            "stopped_instances": list(stopped.order_by("name")),
        },
    )


@login_required
@require_POST
def disk_create_view(request: HttpRequest) -> HttpResponse:
    form = DiskForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
    else:
        data = form.cleaned_data
        _run(
            request,
            lambda: disk_create(user=request.user, name=data["name"], size_gb=data["size_gb"]),
            _("Disk “%(name)s” created.") % {"name": data["name"]},
        )
    return redirect("console:disks")


@login_required
@require_POST
def disk_resize_view(request: HttpRequest, pk: str) -> HttpResponse:
    disk = get_for_user(tenant_disks(request), request.user, "tenant", pk)
    form = SizeForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
    else:
        size = form.cleaned_data["size_gb"]
        _run(
            request,
            lambda: disk_resize(tenant_id=disk.tenant_id, disk_id=disk.pk, size_gb=size),
            _("Disk “%(name)s” grows to %(size)s GB.") % {"name": disk.name, "size": size},
        )
    return redirect("console:disks")


@login_required
@require_POST
def disk_delete_view(request: HttpRequest, pk: str) -> HttpResponse:
    disk = get_for_user(tenant_disks(request), request.user, "tenant", pk)
    _run(
        request,
        lambda: disk_delete(tenant_id=disk.tenant_id, disk_id=disk.pk),
        _("Disk “%(name)s” is being deleted.") % {"name": disk.name},
    )
    return redirect("console:disks")


@login_required
@require_POST
def disk_attach_view(request: HttpRequest, pk: str) -> HttpResponse:
    """Attach a disk to an instance, from either page; `restart` is the user's confirmation."""
    instance = get_for_user(Instance.objects.all(), request.user, "tenant", pk)
    disk_id = str(request.POST.get("disk", ""))[:32]
    restart = request.POST.get("restart") == "1"
    _run(
        request,
        lambda: disk_attach(instance=instance, disk_id=disk_id, restart=restart),
        _("Disk attached to “%(name)s”.") % {"name": instance.name}
        + (" " + _("It restarts to mount it.") if restart else ""),
    )
    return _back(request, instance)


@login_required
@require_POST
def disk_detach_view(request: HttpRequest, pk: str, disk: str) -> HttpResponse:
    instance = get_for_user(Instance.objects.all(), request.user, "tenant", pk)
    restart = request.POST.get("restart") == "1"
    _run(
        request,
        lambda: disk_detach(instance=instance, disk_id=disk, restart=restart),
        _("Disk detached from “%(name)s”; its data is kept.") % {"name": instance.name},
    )
    return _back(request, instance)


def _back(request: HttpRequest, instance: Instance) -> HttpResponse:
    if request.POST.get("next") == "disks":
        return redirect("console:disks")
    return redirect(reverse("instances:detail", args=[instance.pk]) + "#disks")


@login_required
@require_POST
def nas_size_view(request: HttpRequest) -> HttpResponse:
    form = SizeForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
    else:
        size = form.cleaned_data["size_gb"]
        _run(
            request,
            lambda: nas_set_size(user=request.user, size_gb=size),
            _("The shared NAS is %(size)s GB. Instances started from now on mount it at /nas.")
            % {"size": size},
        )
    return redirect(reverse("console:disks") + "#nas")


@login_required
@require_POST
def nas_delete_view(request: HttpRequest) -> HttpResponse:
    tenant_id = request.user.tenant_id  # type: ignore[union-attr]
    _run(
        request,
        lambda: nas_delete(tenant_id=tenant_id),
        _("The shared NAS is being deleted."),
    )
    return redirect(reverse("console:disks") + "#nas")
