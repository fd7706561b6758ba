"""The REST routes of storage: cloud disks and the shared NAS (attaching a disk is an instance's
route, instances.api)."""

from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from starverse.accounts.audit import audit_request
from starverse.core.api.auth import signed_in_user
from starverse.core.api.schema import errors, on_hold_error
from starverse.core.api.views import TenantScopedViewSet
from starverse.core.errors import NotFound
from starverse.core.roles import require_manager
from storage.api.serializers import (
    DiskCreateInput,
    DiskOutput,
    DiskResizeInput,
    NasInput,
    NasOutput,
)
from storage.billing import open_arrears
from storage.disks import disk_create, disk_delete, disk_resize
from storage.models import Disk, SharedStorage
from storage.nas import nas_delete, nas_for_tenant, nas_set_size


@extend_schema_view(
    list=extend_schema(operation_id="disks_list"),
    retrieve=extend_schema(operation_id="disks_retrieve"),
)
class DiskViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet[Disk]):
    """Cloud disks of the caller's tenant: persistent volumes that outlive instances."""

    model = Disk
    owner_field = "tenant"
    serializer_class = DiskOutput

    def filter_queryset_extra(self, queryset: QuerySet[Disk]) -> QuerySet[Disk]:
        return queryset.exclude(status="deleted")

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        user = self.request.user
        if user.is_authenticated:  # the schema generator asks without a signed-in user
            context["arrears"] = open_arrears(user.tenant_id)
        return context

    @extend_schema(
        operation_id="disks_create",
        request=DiskCreateInput,
        responses={201: DiskOutput, **errors(402, 409), **on_hold_error()},
    )
    def create(self, request: Request) -> Response:
        data = self.parse(request, DiskCreateInput)
        disk = disk_create(
            user=signed_in_user(request),
            name=data["name"],
            size_gb=data["size_gb"],
            region=data.get("region", ""),
        )
        audit_request(request, "disk.created", disk, name=disk.name, size_gb=disk.size_gb)
        return Response(self.output(disk), status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="disks_partial_update",
        request=DiskResizeInput,
        responses={200: DiskOutput, **errors(402, 409), **on_hold_error()},
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Grow the disk (claims cannot shrink)."""
        disk = self.get_object()
        data = self.parse(request, DiskResizeInput)
        disk = disk_resize(tenant_id=disk.tenant_id, disk_id=disk.pk, size_gb=data["size_gb"])
        audit_request(request, "disk.resized", disk, size_gb=disk.size_gb)
        return Response(self.output(disk))

    @extend_schema(operation_id="disks_destroy", responses={202: DiskOutput, **errors(409)})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        disk = self.get_object()
        disk = disk_delete(tenant_id=disk.tenant_id, disk_id=disk.pk)
        audit_request(request, "disk.deleted", disk, name=disk.name)
        return Response(self.output(disk), status=status.HTTP_202_ACCEPTED)


class NasView(APIView):
    """The caller's shared NAS: one ReadWriteMany volume per account at /nas in every instance.
    PUT creates it with a quota or grows it; it cannot shrink."""

    def _get(self, request: Request) -> SharedStorage:
        nas = nas_for_tenant(signed_in_user(request).tenant_id)
        if nas is None:
            raise NotFound(_("You have no shared NAS; create one with PUT."), code="no_nas")
        return nas

    @extend_schema(operation_id="nas_retrieve", responses={200: NasOutput, **errors(404)})
    def get(self, request: Request) -> Response:
        return Response(NasOutput(self._get(request)).data)

    @extend_schema(
        operation_id="nas_update",
        request=NasInput,
        responses={200: NasOutput, 201: NasOutput, **errors(402, 409), **on_hold_error()},
    )
    def put(self, request: Request) -> Response:
        data = NasInput(data=request.data)
        data.is_valid(raise_exception=True)
        nas, created = nas_set_size(
            user=signed_in_user(request), size_gb=data.validated_data["size_gb"]
        )
        audit_request(
            request, "nas.created" if created else "nas.resized", nas, size_gb=nas.size_gb
        )
        return Response(NasOutput(nas).data, status=201 if created else 200)

    @extend_schema(operation_id="nas_destroy", responses={202: NasOutput, **errors(404, 409)})
    def delete(self, request: Request) -> Response:
        user = signed_in_user(request)
        require_manager(user)  # the NAS is the whole team's
        nas = nas_delete(tenant_id=user.tenant_id)
        audit_request(request, "nas.deleted", nas)
        return Response(NasOutput(nas).data, status=status.HTTP_202_ACCEPTED)
