from datetime import timedelta
from typing import TypeVar

from django.db.models import Model, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics, mixins, status
from rest_framework.authentication import BaseAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.serializers import TcoInput, TcoOutput
from billing.calculator import tco_compare
from compute.admission import ACCOUNT_LIMITS
from compute.dryrun import order_dry_run
from compute.models import Image, Offering
from fleet.models import GpuModel, Region
from instances.api.serializers import (
    AutoStopSavingsOutput,
    DiskAttachInput,
    GpuModelOutput,
    ImageCreateInput,
    ImageOutput,
    ImageSavedOutput,
    ImageSaveInput,
    InstanceCloneInput,
    InstanceCloneOutput,
    InstanceCreateInput,
    InstanceEventOutput,
    InstanceMetricsOutput,
    InstanceOutput,
    InstanceUpdateInput,
    OfferingOutput,
    PortsInput,
    PortsOutput,
    RegionOutput,
    ShareCreatedOutput,
    ShareCreateInput,
    ShareOutput,
    StartInput,
)
from instances.autostop import auto_stop_savings
from instances.choices import InstanceStatus
from instances.clones import instance_clone
from instances.gateway import (
    instance_ports_set,
    ports_output,
    share_create,
    share_revoke,
    shares_live,
)
from instances.images import image_delete, image_import, image_save
from instances.lifecycle import instance_order, instance_start, instance_stop, instance_terminate
from instances.models import Instance
from instances.schedules import DEFAULT, UNCHANGED, instance_keep_running, instance_schedule_set
from instances.selectors import (
    availability,
    calculator_offering,
    image_warmth,
    instance_metrics,
    instance_page,
    offering_regions,
    queue_positions,
    regions_overview,
)
from instances.volumes import disk_attach, disk_detach
from starverse.accounts.audit import audit_request
from starverse.core.api.auth import signed_in_user
from starverse.core.api.dryrun import DRY_RUN_RESPONSE, dry_run_answer
from starverse.core.api.pagination import Pagination, WholeList
from starverse.core.api.schema import IDEMPOTENCY_KEY, errors, idempotency_key, on_hold_error
from starverse.core.api.views import TenantScopedViewSet
from starverse.core.errors import InvalidInput

M = TypeVar("M", bound=Model)


class CatalogList(generics.ListAPIView[M]):
    """Public catalog reads: prices and availability are no secret. Short lists, never paged."""

    authentication_classes: list[type[BaseAuthentication]] = []
    permission_classes = [AllowAny]
    pagination_class = WholeList


@extend_schema_view(get=extend_schema(operation_id="gpu_models_list"))
class GpuModelListView(CatalogList[GpuModel]):
    serializer_class = GpuModelOutput

    def get_queryset(self) -> QuerySet[GpuModel]:
        return GpuModel.objects.order_by("name")


@extend_schema_view(
    get=extend_schema(
        operation_id="offerings_list",
        parameters=[
            OpenApiParameter(
                "image",
                str,
                description="An image id (GET /images): fills `image_warm` and "
                "`expected_pull_s` for it.",
            )
        ],
        responses={200: OfferingOutput(many=True), **errors(400)},
    )
)
class OfferingListView(CatalogList[Offering]):
    serializer_class = OfferingOutput

    def list(self, request: Request) -> Response:
        rows = list(Offering.objects.filter(active=True).select_related("gpu_model"))
        context = {"availability": availability(rows), "regions": offering_regions(rows)}
        image_id = request.query_params.get("image")
        if image_id is not None:
            image = Image.objects.catalogue().filter(pk=image_id).first()
            if image is None:
                raise InvalidInput(f"image: unknown image {image_id!r}", code="unknown_image")
            context["warmth"] = image_warmth(rows, [image])
        data = OfferingOutput(rows, many=True, context=context).data
        return WholeList().get_paginated_response(data)


class TcoView(APIView):
    """Public: compare buying, a traditional cloud and Starverse for one training job. The
    Starverse column is the price of a catalog offering (`starverse.offering`), as on Rent."""

    authentication_classes: list[type[BaseAuthentication]] = []
    permission_classes = [AllowAny]

    @extend_schema(operation_id="calculator_tco", request=TcoInput, responses=TcoOutput)
    def post(self, request: Request) -> Response:
        data = TcoInput(data=request.data)
        data.is_valid(raise_exception=True)
        key = data.validated_data["starverse"]["offering"]
        offering = calculator_offering(key)
        if offering is None:
            message = _("No active offering “%(key)s”: choose one of the catalog (GET /offerings).")
            raise ValidationError({"starverse": {"offering": [message % {"key": key}]}})
        return Response(tco_compare(data.validated_data, offering))


@extend_schema_view(get=extend_schema(operation_id="regions_list"))
class RegionListView(CatalogList[Region]):
    """The regions (clusters) an order or a disk may name, with their GPUs free now."""

    # It reads the regions' overview (instances.selectors.regions_overview), not Region rows.
    serializer_class = RegionOutput  # type: ignore[assignment]

    def list(self, request: Request) -> Response:
        # many=True takes a list of rows (DRF's __new__ makes a ListSerializer); the stubs, one.
        listed = RegionOutput(regions_overview(), many=True)  # type: ignore[arg-type]
        return WholeList().get_paginated_response(listed.data)


@extend_schema_view(
    get=extend_schema(
        operation_id="images_list",
        parameters=[
            OpenApiParameter(
                "owner",
                str,
                enum=["me"],
                description="`me`: only your own (or your team's) images, in every status.",
            )
        ],
    )
)
class ImageListView(generics.ListAPIView[Image]):
    """The catalogue's images (public) and, signed in, your own ready ones; POST brings your
    own image by reference."""

    permission_classes = [AllowAny]
    pagination_class = WholeList
    serializer_class = ImageOutput

    def get_queryset(self) -> QuerySet[Image]:
        user = self.request.user
        tenant_id = user.tenant_id if user.is_authenticated else None
        if self.request.query_params.get("owner") == "me":  # anonymous: none of one's own
            return Image.objects.filter(tenant_id=tenant_id or "", deleted_at__isnull=True)
        return Image.objects.usable_by(tenant_id)

    @extend_schema(
        operation_id="images_create",
        request=ImageCreateInput,
        responses={201: ImageOutput, **errors(409)},
    )
    def post(self, request: Request) -> Response:
        user = signed_in_user(request)
        data = ImageCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        image = image_import(
            user=user,
            name=data.validated_data["name"],
            reference=data.validated_data["reference"],
            credentials=data.validated_data.get("credentials"),
        )
        audit_request(request, "image.created", image, name=image.name)
        return Response(ImageOutput(image).data, status=status.HTTP_201_CREATED)


@extend_schema_view(retrieve=extend_schema(operation_id="images_retrieve"))
class ImageViewSet(mixins.RetrieveModelMixin, TenantScopedViewSet[Image]):
    """Your own (or your team's) images; the catalogue's are listed at GET /images."""

    model = Image
    owner_field = "tenant"
    serializer_class = ImageOutput

    def filter_queryset_extra(self, queryset: QuerySet[Image]) -> QuerySet[Image]:
        return queryset.filter(deleted_at__isnull=True)

    @extend_schema(operation_id="images_destroy", responses={204: None, **errors(409)})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        image = self.get_object()
        image_delete(image=image)
        audit_request(request, "image.deleted", image, name=image.name)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(retrieve=extend_schema(operation_id="instances_retrieve"))
class InstanceViewSet(mixins.RetrieveModelMixin, TenantScopedViewSet[Instance]):
    """Instances of the caller's tenant. Asynchronous operations answer 202 with the instance."""

    model = Instance
    owner_field = "tenant"
    serializer_class = InstanceOutput

    def filter_queryset_extra(self, queryset: QuerySet[Instance]) -> QuerySet[Instance]:
        queryset = queryset.select_related(
            "offering__gpu_model", "node", "holding", "stop_policy", "monthly"
        )
        wanted = self._status_filter()
        return queryset.filter(status=wanted) if wanted else queryset

    def _status_filter(self) -> str | None:
        wanted = self.request.query_params.get("status")
        if wanted and wanted not in InstanceStatus.values:
            raise InvalidInput(f"status must be one of {', '.join(InstanceStatus.values)}")
        return wanted or None

    @extend_schema(
        operation_id="instances_list",
        parameters=[
            OpenApiParameter("status", str, enum=InstanceStatus.values, description="Only these.")
        ],
        responses={200: InstanceOutput(many=True), **errors(400)},
    )
    def list(self, request: Request) -> Response:
        """The tenant's instances, newest first, paginated like every list (see
        instances.selectors.instance_page for why this one does not go through the ORM)."""
        tenant_id = signed_in_user(request).tenant_id
        paginator = Pagination()
        items = paginator.paginate_fetched(
            request,
            lambda limit, offset: instance_page(
                tenant_id, status=self._status_filter(), limit=limit, offset=offset
            ),
        )
        output = InstanceOutput(context={"queue_positions": queue_positions(items)})
        return paginator.get_paginated_response([output.to_representation(i) for i in items])

    def _accepted(self, instance: Instance) -> Response:
        instance = self.get_queryset().get(pk=instance.pk)
        return Response(self.output(instance), status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        operation_id="instances_create",
        request=InstanceCreateInput,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            200: DRY_RUN_RESPONSE,
            202: InstanceOutput,
            **errors(402, 404, 409, also=ACCOUNT_LIMITS),
            **on_hold_error(),
        },
    )
    def create(self, request: Request) -> Response:
        data = self.parse(request, InstanceCreateInput)
        user = signed_in_user(request)

        def order(key: str) -> tuple[Instance, bool]:
            return instance_order(
                user=user,
                offering_id=data["offering"],
                image_id=data["image"],
                name=data.get("name", ""),
                billing=data["billing"],
                auto_renew=data["auto_renew"],
                ssh_keys=data.get("ssh_keys"),
                disks=data.get("disks"),
                auto_recover=data["auto_recover"],
                ports=data.get("ports"),
                region=data.get("region", ""),
                idle_stop=data.get("idle_stop", DEFAULT),
                stop_at=data.get("stop_at"),
                stop_after_hours=data.get("stop_after_hours"),
                spot_max_wait_minutes=data.get("spot_max_wait_minutes"),
                mirrors=data["mirrors"],
                idempotency_key=key,
            )

        if data["dry_run"]:
            return dry_run_answer(*order_dry_run(lambda: order("")).parts())
        instance, _created = order(idempotency_key(request))
        if _created:
            audit_request(request, "instance.ordered", instance, offering=instance.offering_id)
        return self._accepted(instance)

    @extend_schema(
        operation_id="instances_partial_update",
        request=InstanceUpdateInput,
        responses={200: InstanceOutput, **errors(400, 409)},
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Set or clear the automatic stops: `idle_stop` ({util_pct, minutes} or null; idle
        time counts afresh from now) and `stop_at` (or `stop_after_hours` from now; null
        clears). 409 `cluster_rank` for a cluster's rank, `wrong_state` once terminating."""
        instance = self.get_object()
        data = self.parse(request, InstanceUpdateInput)
        stop_at = data.get("stop_at", UNCHANGED)
        if "stop_after_hours" in data:
            stop_at = timezone.now() + timedelta(hours=data["stop_after_hours"])
        instance_schedule_set(
            instance_id=instance.pk,
            user=signed_in_user(request),
            idle_stop=data.get("idle_stop", UNCHANGED),
            stop_at=stop_at,
        )
        return Response(self.output(self.get_queryset().get(pk=instance.pk)))

    @extend_schema(
        operation_id="instances_keep_running",
        request=None,
        responses={200: InstanceOutput, **errors(409)},
    )
    @action(detail=True, methods=["post"], url_path="keep-running")
    def keep_running(self, request: Request, pk: str | None = None) -> Response:
        """The instance is busy after all: its idle warning goes and idle time counts afresh
        from now, so the idle stop comes `minutes` from now at the earliest. 409 `idle_stop_off`
        without an idle stop, `wrong_state` unless running."""
        instance = instance_keep_running(instance_id=self.get_object().pk)
        return Response(self.output(self.get_queryset().get(pk=instance.pk)))

    @extend_schema(
        operation_id="instances_image_save",
        request=ImageSaveInput,
        parameters=[IDEMPOTENCY_KEY],
        responses={202: ImageSavedOutput, **errors(400, 404, 409)},
    )
    @action(detail=True, methods=["post"], url_path="image")
    def image(self, request: Request, pk: str | None = None) -> Response:
        """Save the instance's system disk as a new image of yours (status `saving`, then
        `ready` or `failed`): from a stopped instance, or a running one with a `warning`. 409
        `wrong_state` otherwise, `image_name_taken` for a name you already use."""
        instance = self.get_object()
        data = self.parse(request, ImageSaveInput)
        saved = image_save(
            user=signed_in_user(request),
            instance=instance,
            name=data["name"],
            idempotency_key=idempotency_key(request),
        )
        if saved.created:
            audit_request(request, "image.saving", saved.image, instance=instance.pk)
        answer = ImageSavedOutput(saved.image, context={"warning": saved.warning})
        return Response(answer.data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(operation_id="instances_auto_stop_savings", responses=AutoStopSavingsOutput)
    @action(detail=False, methods=["get"], url_path="auto-stop-savings")
    def auto_stop_savings(self, request: Request) -> Response:
        """What the automatic stops (idle and scheduled) saved the account this month."""
        found = auto_stop_savings(signed_in_user(request).tenant_id)
        return Response(
            AutoStopSavingsOutput(
                {"since": found.since, "saved_fen": found.saved_fen, "stops": found.stops}
            ).data
        )

    @extend_schema(
        operation_id="instances_destroy",
        request=None,
        parameters=[
            OpenApiParameter(
                "keep_disk",
                bool,
                description="Keep the instance's own disk as a cloud disk instead of deleting it.",
            )
        ],
        responses={202: InstanceOutput, **errors(400, 409)},
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Terminate. 409 `cluster_rank` for a cluster's rank: terminate the cluster."""
        keep = _flag(request, "keep_disk")
        instance = instance_terminate(instance_id=self.get_object().pk, keep_disk=keep)
        audit_request(request, "instance.terminated", instance, keep_disk=keep)
        return self._accepted(instance)

    @extend_schema(
        operation_id="instances_disks_attach",
        request=DiskAttachInput,
        responses={202: InstanceOutput, **errors(409)},
    )
    @action(detail=True, methods=["post"], url_path="disks")
    def disks(self, request: Request, pk: str | None = None) -> Response:
        """Attach a disk. A running instance restarts to do it, only with restart=true."""
        instance = self.get_object()
        data = self.parse(request, DiskAttachInput)
        disk = disk_attach(
            instance=instance,
            disk_id=data["disk"],
            restart=data["restart"],
            actor=signed_in_user(request),
        )
        audit_request(request, "disk.attached", disk, instance=instance.pk)
        return self._accepted(instance)

    @extend_schema(
        operation_id="instances_disks_detach",
        request=None,
        parameters=[OpenApiParameter("restart", bool, description="Confirm the restart.")],
        responses={202: InstanceOutput, **errors(400, 409)},
    )
    @action(detail=True, methods=["delete"], url_path=r"disks/(?P<disk>[A-Za-z0-9_]+)")
    def detach(self, request: Request, pk: str | None = None, disk: str = "") -> Response:
        instance = self.get_object()
        detached = disk_detach(
            instance=instance,
            disk_id=disk,
            restart=_flag(request, "restart"),
            actor=signed_in_user(request),
        )
        audit_request(request, "disk.detached", detached, instance=instance.pk)
        return self._accepted(instance)

    @extend_schema(
        operation_id="instances_stop", request=None, responses={202: InstanceOutput, **errors(409)}
    )
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        """Stop: billing stops, the disk is kept. 409 `wrong_state` unless running or starting,
        `cluster_rank` for a cluster's rank (clusters stop as a whole: stop the cluster)."""
        instance = instance_stop(instance_id=self.get_object().pk)
        audit_request(request, "instance.stopped", instance)
        return self._accepted(instance)

    @extend_schema(
        operation_id="instances_start",
        request=StartInput,
        responses={
            200: DRY_RUN_RESPONSE,
            202: InstanceOutput,
            **errors(400, 402, 409, also=ACCOUNT_LIMITS),
            **on_hold_error(),
        },
    )
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str | None = None) -> Response:
        """Start a stopped instance: with its GPUs, or with `{"gpus": 0}` in no-GPU mode (its
        disks, NAS, image and SSH without a GPU, at cpu_only_price_per_hour_fen; a monthly
        rental in its paid month keeps its GPUs reserved and pays nothing more); with
        `{"dry_run": true}`, the quote or the refusal, starting nothing. 409 `wrong_state`
        unless stopped or failed, `cluster_rank` for a cluster's rank (clusters start as a
        whole: start the cluster); without GPUs, `no_gpu_mode_unavailable` (not offered, or a
        monthly rental's month unpaid) and `no_capacity` (no node has room now: try again
        later)."""
        instance = self.get_object()
        body = self.parse(request, StartInput)
        gpus = body.get("gpus")
        if gpus not in (None, 0, instance.offering.gpu_count):
            raise InvalidInput(
                _("gpus must be 0 (no-GPU mode) or %(count)d, its offering's GPUs.")
                % {"count": instance.offering.gpu_count},
                field="gpus",
            )
        instance_id, attached = instance.pk, gpus != 0
        if body.get("dry_run"):
            found = order_dry_run(
                lambda: instance_start(instance_id=instance_id, gpus_attached=attached)
            )
            return dry_run_answer(*found.parts())
        instance = instance_start(instance_id=instance_id, gpus_attached=attached)
        audit_request(request, "instance.started", instance, **({"gpus": 0} if gpus == 0 else {}))
        return self._accepted(instance)

    @extend_schema(
        operation_id="instances_clone",
        request=InstanceCloneInput,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            200: DRY_RUN_RESPONSE,
            202: InstanceCloneOutput,
            **errors(400, 402, 409, also=ACCOUNT_LIMITS),
            **on_hold_error(),
        },
    )
    @action(detail=True, methods=["post"])
    def clone(self, request: Request, pk: str | None = None) -> Response:
        """Order a new instance with a copy of this one's system disk and own disk, its image
        and settings (ports, mirrors, automatic recovery, your SSH keys among its), in its
        region, on any node with room; it may keep running (the copy is then
        crash-consistent). An order like POST /instances: Idempotency-Key, `dry_run`, the same
        admission and queue. 409 `wrong_state` unless running or stopped; 400
        `clone_disks_too_small`, `clone_other_region`."""
        source = self.get_object()
        data = self.parse(request, InstanceCloneInput)
        user = signed_in_user(request)

        def order(key: str) -> tuple[Instance, bool]:
            return instance_clone(
                user=user,
                source=source,
                name=data.get("name", ""),
                offering_id=data.get("offering", ""),
                region=data.get("region", ""),
                idempotency_key=key,
            )

        if data["dry_run"]:
            return dry_run_answer(*order_dry_run(lambda: order("")).parts())
        instance, created = order(idempotency_key(request))
        if created:
            audit_request(request, "instance.cloned", instance, source=source.pk)
        running = source.status == InstanceStatus.RUNNING
        answer = {
            "instance": self.output(self.get_queryset().get(pk=instance.pk)),
            "cloned_from": source.pk,
            "consistency": "crash_consistent" if running else "consistent",
        }
        return Response(answer, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        operation_id="instances_ports_update",
        request=PortsInput,
        responses={200: PortsOutput, **errors(409)},
    )
    @action(detail=True, methods=["put"])
    def ports(self, request: Request, pk: str | None = None) -> Response:
        """Set the HTTP ports served through the gateway besides Jupyter's; a 400 names the
        port that is refused. The worker brings the routes in line within seconds."""
        instance = self.get_object()
        data = self.parse(request, PortsInput)
        instance = instance_ports_set(instance_id=instance.pk, ports=data["ports"])
        audit_request(request, "instance.ports_changed", instance, ports=data["ports"])
        return Response({"ports": ports_output(instance)})

    @extend_schema(operation_id="instances_shares_list", responses=ShareOutput(many=True))
    @action(detail=True, methods=["get"], pagination_class=WholeList)
    def shares(self, request: Request, pk: str | None = None) -> Response:
        """The instance's live share links (their links were shown once, when made)."""
        rows = shares_live(self.get_object())
        return WholeList().get_paginated_response(ShareOutput(rows, many=True).data)

    @extend_schema(
        operation_id="instances_shares_create",
        request=ShareCreateInput,
        responses={201: ShareCreatedOutput, **errors(409)},
    )
    @shares.mapping.post
    def shares_add(self, request: Request, pk: str | None = None) -> Response:
        """A link that opens one served port to whoever holds it, until revoked."""
        instance = self.get_object()
        data = self.parse(request, ShareCreateInput)
        share, url = share_create(
            instance=instance, port=data["port"], user=signed_in_user(request)
        )
        audit_request(request, "share.created", share, instance=instance.pk, port=share.port)
        body = ShareCreatedOutput(share, context={"url": url}).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(operation_id="instances_shares_destroy", request=None, responses={204: None})
    @action(detail=True, methods=["delete"], url_path=r"shares/(?P<share>[A-Za-z0-9_]+)")
    def shares_remove(self, request: Request, pk: str | None = None, share: str = "") -> Response:
        """Revoke a share link: it stops working at once."""
        instance = self.get_object()
        revoked = share_revoke(instance=instance, share_id=share)
        audit_request(request, "share.revoked", revoked, instance=instance.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(operation_id="instances_events_list", responses=InstanceEventOutput(many=True))
    @action(detail=True, methods=["get"], pagination_class=WholeList)
    def events(self, request: Request, pk: str | None = None) -> Response:
        rows = self.get_object().events.order_by("at", "id")
        return WholeList().get_paginated_response(InstanceEventOutput(rows, many=True).data)

    @extend_schema(operation_id="instances_metrics_retrieve", responses=InstanceMetricsOutput)
    @action(detail=True, methods=["get"])
    def metrics(self, request: Request, pk: str | None = None) -> Response:
        return Response({"results": instance_metrics(self.get_object())})


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise InvalidInput(f"{name} must be true or false", code="invalid")
    return value in ("true", "1")
