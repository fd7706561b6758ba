import json
from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny, IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from instances.api.serializers import (
    DiskAttachInput,
    DiskCreateInput,
    DiskOutput,
    DiskResizeInput,
    GpuModelOutput,
    ImageOutput,
    InstanceCreateInput,
    InstanceEventOutput,
    InstanceOutput,
    OfferingOutput,
)
from instances.choices import InstanceStatus
from instances.disks import (
    disk_attach,
    disk_create,
    disk_delete,
    disk_detach,
    disk_resize,
)
from instances.fleet import node_for_token, node_register, report_ingest
from instances.lifecycle import instance_order, instance_start, instance_stop, instance_terminate
from instances.models import Disk, GpuModel, Image, Instance, Offering
from instances.selectors import (
    availability,
    capacity_by_model,
    fleet_nodes,
    instance_metrics,
    instance_page,
    latest_samples,
)
from instances.telemetry import report_parse
from starverse.core.api.pagination import Pagination
from starverse.core.api.serializers import InputSerializer, StrictCharField, StrictIntegerField
from starverse.core.api.views import TenantScopedViewSet
from starverse.core.errors import InvalidInput, NotFound, Unauthenticated

MAX_REPORT_BYTES = 2 * 1024 * 1024


class NodeReportView(APIView):
    """The node agent's report, authenticated with the node's own token."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes: list = []

    @extend_schema(request=dict, responses={202: dict})
    def post(self, request: Request, name: str) -> Response:
        header = request.headers.get("Authorization", "")
        token = header[7:] if header[:7].lower() == "bearer " else ""
        node = node_for_token(name=name, token=token)
        if node is None:
            raise Unauthenticated(_("Unknown node or wrong node token."))
        if len(request.body) > MAX_REPORT_BYTES:
            return Response({"detail": "report too large", "code": "too_large"}, status=400)
        try:
            payload = json.loads(request.body)
        except ValueError as error:
            return Response(
                {"detail": f"body: not JSON ({error})", "code": "invalid_report"}, status=400
            )
        stored = report_ingest(node=node, report=report_parse(payload, node_name=name))
        return Response({"accepted_samples": stored}, status=status.HTTP_202_ACCEPTED)


class GpuOutput(serializers.Serializer):
    index = serializers.IntegerField()
    uuid = serializers.CharField()
    product = serializers.CharField()
    memory_mb = serializers.IntegerField()
    lost = serializers.BooleanField()
    util = serializers.IntegerField(allow_null=True)
    mem_used_mb = serializers.IntegerField(allow_null=True)
    temp_c = serializers.IntegerField(allow_null=True)
    power_w = serializers.FloatField(allow_null=True)


class NodeOutput(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    gpu_product = serializers.CharField()
    gpu_count = serializers.IntegerField()
    gpu_memory_mb = serializers.IntegerField()
    interconnect = serializers.CharField()
    state = serializers.CharField()
    state_reason = serializers.CharField()
    last_report_at = serializers.DateTimeField(allow_null=True)
    driver_version = serializers.CharField()
    gpus = GpuOutput(many=True)


def node_rows(nodes: list[Any]) -> list[dict[str, Any]]:
    gpus = [gpu for node in nodes for gpu in node.gpus.all()]
    latest = latest_samples([gpu.pk for gpu in gpus])
    rows = []
    for node in nodes:
        items = []
        for gpu in node.gpus.all():
            sample = latest.get(gpu.pk)
            items.append(
                {
                    "index": gpu.index,
                    "uuid": gpu.uuid,
                    "product": gpu.product,
                    "memory_mb": gpu.memory_mb,
                    "lost": gpu.lost_at is not None,
                    "util": sample.util if sample else None,
                    "mem_used_mb": sample.mem_used_mb if sample else None,
                    "temp_c": sample.temp_c if sample else None,
                    "power_w": sample.power_w if sample else None,
                }
            )
        rows.append(
            {
                "id": node.id,
                "name": node.name,
                "gpu_product": node.gpu_product,
                "gpu_count": node.gpu_count,
                "gpu_memory_mb": node.gpu_memory_mb,
                "interconnect": node.interconnect,
                "state": node.state,
                "state_reason": node.state_reason,
                "last_report_at": node.last_report_at,
                "driver_version": node.driver_version,
                "gpus": items,
            }
        )
    return rows


class NodeListView(APIView):
    """Staff only: the fleet with health and live telemetry."""

    permission_classes = [IsAdminUser]

    @extend_schema(responses=NodeOutput(many=True))
    def get(self, request: Request) -> Response:
        paginator = Pagination()
        page = paginator.paginate_queryset(fleet_nodes(), request, view=self)
        return paginator.get_paginated_response(NodeOutput(node_rows(page or []), many=True).data)


class CapacityView(APIView):
    """Staff only: GPUs per product — total, unhealthy and free."""

    permission_classes = [IsAdminUser]

    @extend_schema(responses=dict)
    def get(self, request: Request) -> Response:
        return Response({"results": capacity_by_model()})


class RegisterInput(InputSerializer):
    name = StrictCharField(max_length=253)
    bootstrap_token = StrictCharField(max_length=200)
    gpu_product = StrictCharField(max_length=100)
    gpu_count = StrictIntegerField(min_value=1, max_value=16)
    gpu_memory_mb = StrictIntegerField(min_value=0)


class NodeRegisterView(APIView):
    """A node agent joining with the fleet's bootstrap token receives its own node token."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=RegisterInput, responses={201: dict})
    def post(self, request: Request) -> Response:
        data = RegisterInput(data=request.data)
        data.is_valid(raise_exception=True)
        spec = {k: data.validated_data[k] for k in ("gpu_product", "gpu_count", "gpu_memory_mb")}
        try:
            node, token = node_register(
                name=data.validated_data["name"],
                spec=spec,
                bootstrap_token=data.validated_data["bootstrap_token"],
            )
        except InvalidInput as error:
            raise Unauthenticated(error.message) from None
        return Response({"name": node.name, "token": token}, status=status.HTTP_201_CREATED)


class CatalogView(APIView):
    """Public catalog reads: prices and availability are no secret."""

    authentication_classes: list = []
    permission_classes = [AllowAny]


class GpuModelListView(CatalogView):
    @extend_schema(responses=GpuModelOutput(many=True))
    def get(self, request: Request) -> Response:
        rows = GpuModel.objects.order_by("name")
        return Response(
            {
                "count": rows.count(),
                "next": None,
                "previous": None,
                "results": GpuModelOutput(rows, many=True).data,
            }
        )


class OfferingListView(CatalogView):
    @extend_schema(responses=OfferingOutput(many=True))
    def get(self, request: Request) -> Response:
        rows = list(Offering.objects.filter(active=True).select_related("gpu_model"))
        data = OfferingOutput(rows, many=True, context={"availability": availability(rows)}).data
        return Response({"count": len(rows), "next": None, "previous": None, "results": data})


class ImageListView(CatalogView):
    @extend_schema(responses=ImageOutput(many=True))
    def get(self, request: Request) -> Response:
        rows = Image.objects.filter(active=True)
        return Response(
            {
                "count": rows.count(),
                "next": None,
                "previous": None,
                "results": ImageOutput(rows, many=True).data,
            }
        )


class InstanceViewSet(mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Instances of the caller's tenant. Asynchronous operations answer 202 with the instance."""

    model = Instance
    owner_field = "tenant"
    serializer_class = InstanceOutput

    def filter_queryset_extra(self, queryset: QuerySet) -> QuerySet:
        queryset = queryset.select_related("offering__gpu_model", "node")
        wanted = self._status_filter()
        return queryset.filter(status=wanted) if wanted else queryset

    def _status_filter(self) -> str | None:
        wanted = self.request.query_params.get("status")
        if wanted and wanted not in InstanceStatus.values:
            raise InvalidInput(f"status must be one of {', '.join(InstanceStatus.values)}")
        return wanted or None

    def list(self, request: Request) -> Response:
        """The tenant's instances, newest first, paginated like every list (see
        instances.selectors.instance_page for why this one does not go through the ORM)."""
        paginator = Pagination()
        items = paginator.paginate_fetched(
            request,
            lambda limit, offset: instance_page(
                request.user.tenant_id, status=self._status_filter(), limit=limit, offset=offset
            ),
        )
        output = InstanceOutput()
        return paginator.get_paginated_response([output.to_representation(i) for i in items])

    def _accepted(self, instance: Instance) -> Response:
        instance = self.get_queryset().get(pk=instance.pk)
        return Response(self.output(instance), status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=InstanceCreateInput, responses={202: InstanceOutput})
    def create(self, request: Request) -> Response:
        data = self.parse(request, InstanceCreateInput)
        instance, _created = instance_order(
            user=request.user,
            offering_id=data["offering"],
            image_id=data["image"],
            name=data.get("name", ""),
            billing=data["billing"],
            auto_renew=data["auto_renew"],
            ssh_keys=data.get("ssh_keys"),
            disks=data.get("disks"),
            auto_recover=data["auto_recover"],
            idempotency_key=request.headers.get("Idempotency-Key", "")[:200],
        )
        return self._accepted(instance)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "keep_disk",
                bool,
                description="Keep the instance's own disk as a cloud disk instead of deleting it.",
            )
        ]
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        keep = _flag(request, "keep_disk")
        return self._accepted(instance_terminate(instance_id=self.get_object().pk, keep_disk=keep))

    @extend_schema(request=DiskAttachInput, responses={202: InstanceOutput})
    @action(detail=True, methods=["post"], url_path="disks")
    def disks(self, request: Request, pk: str | None = None) -> Response:
        """Attach a disk. A running instance restarts to do it, only with restart=true."""
        instance = self.get_object()
        data = self.parse(request, DiskAttachInput)
        disk_attach(instance=instance, disk_id=data["disk"], restart=data["restart"])
        return self._accepted(instance)

    @extend_schema(
        parameters=[OpenApiParameter("restart", bool, description="Confirm the restart.")],
        responses={202: InstanceOutput},
    )
    @action(detail=True, methods=["delete"], url_path=r"disks/(?P<disk>[A-Za-z0-9_]+)")
    def detach(self, request: Request, pk: str | None = None, disk: str = "") -> Response:
        instance = self.get_object()
        disk_detach(instance=instance, disk_id=disk, restart=_flag(request, "restart"))
        return self._accepted(instance)

    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        return self._accepted(instance_stop(instance_id=self.get_object().pk))

    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str | None = None) -> Response:
        return self._accepted(instance_start(instance_id=self.get_object().pk))

    @extend_schema(responses=InstanceEventOutput(many=True))
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str | None = None) -> Response:
        rows = self.get_object().events.order_by("at", "id")
        return Response(
            {
                "count": rows.count(),
                "next": None,
                "previous": None,
                "results": InstanceEventOutput(rows, many=True).data,
            }
        )

    @action(detail=True, methods=["get"])
    def metrics(self, request: Request, pk: str | None = None) -> Response:
        return Response({"results": instance_metrics(self.get_object())})


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise InvalidInput(f"{name} must be true or false", code="invalid")
    return value in ("true", "1")


class DiskViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Cloud disks of the caller's tenant: persistent volumes that outlive instances."""

    model = Disk
    owner_field = "tenant"
    serializer_class = DiskOutput

    def filter_queryset_extra(self, queryset: QuerySet) -> QuerySet:
        return queryset.exclude(status="deleted")

    def get_serializer_context(self) -> dict[str, Any]:
        from instances.storage import open_arrears

        context = super().get_serializer_context()
        user = self.request.user
        if getattr(user, "is_authenticated", False):
            context["arrears"] = open_arrears(user.tenant_id)
        return context

    @extend_schema(request=DiskCreateInput, responses={201: DiskOutput})
    def create(self, request: Request) -> Response:
        data = self.parse(request, DiskCreateInput)
        disk = disk_create(user=request.user, name=data["name"], size_gb=data["size_gb"])
        return Response(self.output(disk), status=status.HTTP_201_CREATED)

    @extend_schema(request=DiskResizeInput, responses={200: DiskOutput})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Grow the disk (claims cannot shrink)."""
        disk = self.get_object()
        data = self.parse(request, DiskResizeInput)
        disk = disk_resize(tenant_id=disk.tenant_id, disk_id=disk.pk, size_gb=data["size_gb"])
        return Response(self.output(disk))

    @extend_schema(responses={202: DiskOutput})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        disk = self.get_object()
        disk = disk_delete(tenant_id=disk.tenant_id, disk_id=disk.pk)
        return Response(self.output(disk), status=status.HTTP_202_ACCEPTED)


class NasInput(InputSerializer):
    size_gb = StrictIntegerField(min_value=1)


class NasOutput(serializers.Serializer):
    id = serializers.CharField()
    size_gb = serializers.IntegerField(help_text="The quota.")
    status = serializers.CharField()
    mount_path = serializers.CharField(default="/nas")
    used_bytes = serializers.IntegerField(allow_null=True)
    used_at = serializers.DateTimeField(allow_null=True)


class NasView(APIView):
    """The caller's shared NAS: one ReadWriteMany volume per account at /nas in every instance.
    PUT creates it with a quota or grows it; it cannot shrink."""

    def _get(self, request: Request) -> Any:
        from datasets.shared_storage import nas_for_tenant

        nas = nas_for_tenant(request.user.tenant_id)
        if nas is None:
            raise NotFound(_("You have no shared NAS; create one with PUT."), code="no_nas")
        return nas

    @extend_schema(responses=NasOutput)
    def get(self, request: Request) -> Response:
        return Response(NasOutput(self._get(request)).data)

    @extend_schema(request=NasInput, responses={200: NasOutput, 201: NasOutput})
    def put(self, request: Request) -> Response:
        from datasets.shared_storage import nas_set_size

        data = NasInput(data=request.data)
        data.is_valid(raise_exception=True)
        nas, created = nas_set_size(user=request.user, size_gb=data.validated_data["size_gb"])
        return Response(NasOutput(nas).data, status=201 if created else 200)

    @extend_schema(responses={202: NasOutput})
    def delete(self, request: Request) -> Response:
        from datasets.shared_storage import nas_delete

        nas = nas_delete(tenant_id=request.user.tenant_id)
        return Response(NasOutput(nas).data, status=status.HTTP_202_ACCEPTED)
