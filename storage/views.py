"""Console pages for storage: the Disks page (cloud disks, the shared NAS, the countdown of unpaid
storage) and its forms. They change things only through storage.disks and storage.nas, so the
console and the API follow the same rules. Attaching a disk to an instance is an instance's
action (instances.views)."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from starverse.accounts.audit import audit_request
from starverse.core.console import page_user, run_change, run_service
from starverse.core.roles import require_manager
from starverse.core.tenancy import get_for_user
from storage.disks import disk_create, disk_delete, disk_resize
from storage.nas import nas_delete, nas_set_size
from storage.selectors import tenant_disks


class SizeForm(forms.Form):
    size_gb = forms.IntegerField(min_value=1)


class DiskForm(SizeForm):
    name = forms.CharField(max_length=63)
    region = forms.CharField(max_length=32, required=False)


def _form_error(form: forms.Form) -> str:
    return " ".join(str(e) for errors in form.errors.values() for e in errors)


@login_required
@require_POST
def disk_create_view(request: HttpRequest) -> HttpResponse:
    form = DiskForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
    else:
        data = form.cleaned_data

        def create() -> None:
            disk = disk_create(
                user=page_user(request),
                name=data["name"],
                size_gb=data["size_gb"],
                region=data["region"],
            )
            audit_request(request, "disk.created", disk, name=disk.name, size_gb=disk.size_gb)

        run_service(
            request,
            create,
            _("Disk “%(name)s” created.") % {"name": data["name"]},
        )
    return redirect("console:disks")


@login_required
@require_POST
def disk_resize_view(request: HttpRequest, pk: str) -> HttpResponse:
    disk = get_for_user(tenant_disks(page_user(request)), request.user, "tenant", pk)
    form = SizeForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
    else:
        size = form.cleaned_data["size_gb"]

        def resize() -> None:
            resized = disk_resize(tenant_id=disk.tenant_id, disk_id=disk.pk, size_gb=size)
            audit_request(request, "disk.resized", resized, size_gb=resized.size_gb)

        run_change(
            request,
            disk,
            resize,
            _("Disk “%(name)s” grows to %(size)s GB.") % {"name": disk.name, "size": size},
        )
    return redirect("console:disks")


@login_required
@require_POST
def disk_delete_view(request: HttpRequest, pk: str) -> HttpResponse:
    disk = get_for_user(tenant_disks(page_user(request)), request.user, "tenant", pk)

    def delete() -> None:
        deleted = disk_delete(tenant_id=disk.tenant_id, disk_id=disk.pk)
        audit_request(request, "disk.deleted", deleted, name=deleted.name)

    run_change(
        request,
        disk,
        delete,
        _("Disk “%(name)s” is being deleted.") % {"name": disk.name},
    )
    return redirect("console:disks")


@login_required
@require_POST
def nas_size_view(request: HttpRequest) -> HttpResponse:
    form = SizeForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
    else:
        size = form.cleaned_data["size_gb"]

        def set_size() -> None:
            nas, created = nas_set_size(user=page_user(request), size_gb=size)
            audit_request(
                request, "nas.created" if created else "nas.resized", nas, size_gb=nas.size_gb
            )

        run_service(
            request,
            set_size,
            _("The shared NAS is %(size)s GB. Instances started from now on mount it at /nas.")
            % {"size": size},
        )
    return redirect(reverse("console:disks") + "#nas")


@login_required
@require_POST
def nas_delete_view(request: HttpRequest) -> HttpResponse:
    user = page_user(request)
    tenant_id = user.tenant_id

    def delete() -> None:
        require_manager(user)  # the NAS is the whole team's
        nas = nas_delete(tenant_id=tenant_id)
        audit_request(request, "nas.deleted", nas)

    run_service(
        request,
        delete,
        _("The shared NAS is being deleted."),
    )
    return redirect(reverse("console:disks") + "#nas")
