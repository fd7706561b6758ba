"""The fleet's REST routes: the node agents' registration and reports (node tokens), and the
staff's view of the fleet and its capacity."""

import json
from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny, IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.selectors import capacity_by_model, fleet_nodes, latest_samples
from fleet.services import node_for_token, node_register, report_ingest
from fleet.telemetry import report_parse
from starverse.core.api.pagination import Pagination
from starverse.core.api.serializers import InputSerializer, StrictCharField, StrictIntegerField
from starverse.core.errors import InvalidInput, Unauthenticated

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
