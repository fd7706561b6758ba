"""The fleet's REST routes: the node agents' registration and reports (node tokens), and the
staff's view of the fleet and its capacity."""

import io

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.permissions import AllowAny, IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from compute.selectors import capacity_by_model
from fleet.api.serializers import (
    CapacityOutput,
    GpuRow,
    NodeOutput,
    NodeReportInput,
    NodeRow,
    RegisteredOutput,
    RegisterInput,
    ReportAcceptedOutput,
)
from fleet.models import Node
from fleet.selectors import fleet_nodes, latest_samples
from fleet.services import node_for_token, node_register, report_ingest
from fleet.telemetry import report_parse
from starverse.core.api import parsers
from starverse.core.api.pagination import Pagination
from starverse.core.api.schema import errors
from starverse.core.errors import InvalidInput, Unauthenticated

MAX_REPORT_BYTES = 2 * 1024 * 1024


class NodeReportView(APIView):
    """The node agent's report, authenticated with the node's own token."""

    authentication_classes: list[type[BaseAuthentication]] = []
    permission_classes = [AllowAny]
    throttle_classes: list[type[BaseThrottle]] = []

    @extend_schema(
        operation_id="nodes_report",
        request=NodeReportInput,
        responses={202: ReportAcceptedOutput, **errors(400, 401)},
    )
    def post(self, request: Request, name: str) -> Response:
        header = request.headers.get("Authorization", "")
        token = header[7:] if header[:7].lower() == "bearer " else ""
        node = node_for_token(name=name, token=token)
        if node is None:
            raise Unauthenticated(_("Unknown node or wrong node token."))
        media = request.content_type.split(";")[0].strip()
        if media != "application/json":  # read below as JSON, the one media type of the API
            raise UnsupportedMediaType(media)
        if len(request.body) > MAX_REPORT_BYTES:
            return Response({"detail": "report too large", "code": "too_large"}, status=400)
        try:
            payload = parsers.load(io.BytesIO(request.body))
        except ParseError as error:
            return Response(
                {"detail": f"body: not JSON ({error})", "code": "invalid_report"}, status=400
            )
        report = report_parse(payload, node_name=name)
        stored = report_ingest(node=node, report=report)
        answer = {"accepted_samples": stored, "refused": report.refused}
        return Response(ReportAcceptedOutput(answer).data, status=status.HTTP_202_ACCEPTED)


def node_rows(nodes: list[Node]) -> list[NodeRow]:
    gpus = [gpu for node in nodes for gpu in node.gpus.all()]
    latest = latest_samples([gpu.pk for gpu in gpus])
    rows: list[NodeRow] = []
    for node in nodes:
        items: list[GpuRow] = []
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
    pagination_class = Pagination

    @extend_schema(operation_id="nodes_list", responses=NodeOutput(many=True))
    def get(self, request: Request) -> Response:
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(fleet_nodes(), request, view=self)
        # many=True takes a list of rows (DRF's __new__ makes a ListSerializer); the stubs, one.
        nodes = NodeOutput(node_rows(page or []), many=True)  # type: ignore[arg-type]
        return paginator.get_paginated_response(nodes.data)


class CapacityView(APIView):
    """Staff only: GPUs per product — total, unhealthy and free."""

    permission_classes = [IsAdminUser]

    @extend_schema(operation_id="nodes_capacity_retrieve", responses=CapacityOutput)
    def get(self, request: Request) -> Response:
        return Response({"results": capacity_by_model()})


class NodeRegisterView(APIView):
    """A node agent joining with the fleet's bootstrap token receives its own node token."""

    authentication_classes: list[type[BaseAuthentication]] = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="nodes_register",
        request=RegisterInput,
        responses={201: RegisteredOutput, **errors(400, 401, 409)},
    )
    def post(self, request: Request) -> Response:
        data = RegisterInput(data=request.data)
        data.is_valid(raise_exception=True)
        spec = {k: data.validated_data[k] for k in ("gpu_product", "gpu_count", "gpu_memory_mb")}
        try:
            node, token = node_register(
                name=data.validated_data["name"],
                spec=spec,
                bootstrap_token=data.validated_data["bootstrap_token"],
                region=data.validated_data.get("region", ""),
            )
        except InvalidInput as error:
            if error.code == "unknown_region":
                raise
            raise Unauthenticated(error.message) from None
        return Response({"name": node.name, "token": token}, status=status.HTTP_201_CREATED)
