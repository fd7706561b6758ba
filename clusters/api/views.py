from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.authentication import BaseAuthentication
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters.api.serializers import (
    ClusterCreateInput,
    ClusterEventOutput,
    ClusterMetricsOutput,
    ClusterOutput,
    ClusterScaleInput,
    ClusterScaleOutput,
    PlanInput,
    PlanOutput,
)
from clusters.models import Cluster
from clusters.planner import plan
from clusters.selectors import cluster_events, cluster_metrics, cluster_view, cluster_views
from clusters.services import (
    cluster_order,
    cluster_scale,
    cluster_start,
    cluster_stop,
    cluster_terminate,
)
from compute.admission import ACCOUNT_LIMITS
from compute.dryrun import order_dry_run
from starverse.accounts.audit import audit_request
from starverse.core.api.auth import signed_in_user
from starverse.core.api.dryrun import DRY_RUN_RESPONSE, DryRunInput, dry_run_answer, dry_run_asked
from starverse.core.api.pagination import Pagination, WholeList
from starverse.core.api.schema import IDEMPOTENCY_KEY, errors, idempotency_key, on_hold_error
from starverse.core.api.views import TenantScopedViewSet


@extend_schema_view(retrieve=extend_schema(operation_id="clusters_retrieve"))
class ClusterViewSet(mixins.RetrieveModelMixin, TenantScopedViewSet[Cluster]):
    """Clusters of the caller's tenant. Asynchronous operations answer 202 with the cluster."""

    model = Cluster
    owner_field = "tenant"
    # It reads a cluster's view (clusters.selectors.cluster_view), not the row the stubs expect.
    serializer_class = ClusterOutput  # type: ignore[assignment]

    def filter_queryset_extra(self, queryset: QuerySet[Cluster]) -> QuerySet[Cluster]:
        # a multi-node job's cluster is the job's (404 here): /jobs shows and acts on it
        return queryset.filter(owner="").select_related("offering")

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(ClusterOutput(cluster_view(self.get_object())).data)

    def _accepted(self, cluster: Cluster) -> Response:
        cluster = self.get_queryset().get(pk=cluster.pk)
        return Response(ClusterOutput(cluster_view(cluster)).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(operation_id="clusters_list", responses={200: ClusterOutput(many=True)})
    def list(self, request: Request) -> Response:
        """The tenant's clusters, newest first, each with its ranks."""
        paginator = Pagination()
        page = paginator.paginate_queryset(self.get_queryset().order_by("-created_at"), request)
        views = cluster_views(list(page or []))
        return paginator.get_paginated_response([ClusterOutput(v).data for v in views])

    @extend_schema(
        operation_id="clusters_create",
        request=ClusterCreateInput,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            200: DRY_RUN_RESPONSE,
            202: ClusterOutput,
            **errors(402, 409, also=ACCOUNT_LIMITS),
            **on_hold_error(),
        },
    )
    def create(self, request: Request) -> Response:
        data = self.parse(request, ClusterCreateInput)
        user = signed_in_user(request)

        def order(key: str) -> tuple[Cluster, bool]:
            return cluster_order(
                user=user,
                offering_id=data["offering"],
                image_id=data["image"],
                node_count=data["node_count"],
                template=data["template"],
                name=data.get("name", ""),
                billing=data["billing"],
                ssh_keys=data.get("ssh_keys"),
                disks=data.get("disks"),
                parallelism=data.get("parallelism"),
                region=data.get("region", ""),
                idempotency_key=key,
                spot_max_wait_minutes=data.get("spot_max_wait_minutes"),
            )

        if data["dry_run"]:
            return dry_run_answer(*order_dry_run(lambda: order("")).parts())
        cluster, _created = order(idempotency_key(request))
        if _created:
            audit_request(request, "cluster.ordered", cluster, nodes=data["node_count"])
        return self._accepted(cluster)

    @extend_schema(
        operation_id="clusters_destroy", request=None, responses={202: ClusterOutput, **errors()}
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        cluster = cluster_terminate(cluster=self.get_object())
        audit_request(request, "cluster.terminated", cluster)
        return self._accepted(cluster)

    @extend_schema(
        operation_id="clusters_stop", request=None, responses={202: ClusterOutput, **errors(409)}
    )
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        cluster = cluster_stop(cluster=self.get_object())
        audit_request(request, "cluster.stopped", cluster)
        return self._accepted(cluster)

    @extend_schema(
        operation_id="clusters_start",
        request=DryRunInput,
        responses={
            200: DRY_RUN_RESPONSE,
            202: ClusterOutput,
            **errors(402, 409, also=ACCOUNT_LIMITS),
            **on_hold_error(),
        },
    )
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str | None = None) -> Response:
        found = self.get_object()
        if dry_run_asked(request):
            return dry_run_answer(*order_dry_run(lambda: cluster_start(cluster=found)).parts())
        cluster = cluster_start(cluster=found)
        audit_request(request, "cluster.started", cluster)
        return self._accepted(cluster)

    @extend_schema(
        operation_id="clusters_scale",
        request=ClusterScaleInput,
        responses={202: ClusterScaleOutput, **errors(409)},
        description="Scale a stopped cluster (409 `wrong_state` otherwise). Down terminates the "
        "highest ranks: their own disks are deleted unless `keep_disks`, their cloud disks "
        "detached intact; a monthly cluster in its paid month is not scaled down (409 "
        "`paid_period`). Up adds stopped ranks; the next start places every rank together.",
    )
    @action(detail=True, methods=["post"])
    def scale(self, request: Request, pk: str | None = None) -> Response:
        found = self.get_object()  # another tenant's cluster is a 404 whatever the body
        data = self.parse(request, ClusterScaleInput)
        cluster, said = cluster_scale(
            cluster=found,
            node_count=data["node_count"],
            user=signed_in_user(request),
            keep_disks=data["keep_disks"],
        )
        audit_request(request, "cluster.scaled", cluster, nodes=data["node_count"])
        cluster = self.get_queryset().get(pk=cluster.pk)
        output = ClusterScaleOutput(cluster_view(cluster), context={"message": said})
        return Response(output.data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(operation_id="clusters_events_list", responses=ClusterEventOutput(many=True))
    @action(detail=True, methods=["get"], pagination_class=WholeList)
    def events(self, request: Request, pk: str | None = None) -> Response:
        rows = cluster_events(self.get_object())
        # many=True takes a list of rows (DRF's __new__ makes a ListSerializer); the stubs, one.
        listed = ClusterEventOutput(rows, many=True)  # type: ignore[arg-type]
        return WholeList().get_paginated_response(listed.data)

    @extend_schema(operation_id="clusters_metrics_retrieve", responses=ClusterMetricsOutput)
    @action(detail=True, methods=["get"])
    def metrics(self, request: Request, pk: str | None = None) -> Response:
        return Response({"results": cluster_metrics(self.get_object())})


class PlanView(APIView):
    """Public: the parallelism planner (clusters.planner). No authentication; throttled per
    client address like the other anonymous routes."""

    authentication_classes: list[type[BaseAuthentication]] = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="clusters_plan",
        request=PlanInput,
        responses={200: PlanOutput},
        description="TP × PP × DP degrees and a ZeRO stage that fit the model in the GPUs' "
        "memory, the per-GPU estimate line by line and a Megatron-LM command. 400 names a "
        "field that does not suit the others, or (code `does_not_fit`) says what the leanest "
        "split still needs.",
    )
    def post(self, request: Request) -> Response:
        data = PlanInput(data=request.data)
        data.is_valid(raise_exception=True)
        found = plan(
            data.validated_data["shape"],
            data.validated_data["hardware"],
            data.validated_data["pins"],
        )
        return Response(found.as_dict())
