from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.http import HttpResponse, StreamingHttpResponse
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from compute.admission import ACCOUNT_LIMITS
from compute.dryrun import order_dry_run
from jobs.api.serializers import JobCreateInput, JobDryRunOutput, JobEventOutput, JobOutput
from jobs.models import Job
from jobs.selectors import (
    job_events,
    job_view,
    job_views,
    log_follow,
    log_source,
    log_text,
)
from jobs.services import JobRequest, job_cancel, job_submit
from jobs.skypilot import TaskError, catalog_from_db, parse_task
from starverse.accounts.audit import audit_request
from starverse.core.api.auth import signed_in_user
from starverse.core.api.dryrun import DRY_RUN_PARAM, dry_run_answer, dry_run_queried
from starverse.core.api.pagination import Pagination, WholeList
from starverse.core.api.parsers import JSONParser
from starverse.core.api.schema import IDEMPOTENCY_KEY, errors, idempotency_key, on_hold_error
from starverse.core.api.views import TenantScopedViewSet
from starverse.core.errors import FieldInvalid, InvalidInput, NotFound

MAX_TASK_BYTES = 256 * 1024


class TaskYamlParser(BaseParser):
    """A SkyPilot task YAML, read as it is (jobs.skypilot reads it)."""

    media_type = "text/yaml"

    def parse(  # type: ignore[override]  # the text, not a mapping: the view reads it
        self, stream: Any, media_type: str | None = None, parser_context: Any = None
    ) -> str:
        raw = stream.read(MAX_TASK_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_TASK_BYTES:
            raise InvalidInput(_("The task is larger than 256 KiB."), code="too_large")
        try:
            return str(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidInput(_("The task is not UTF-8 text."), code="invalid_yaml") from None


class ApplicationYamlParser(TaskYamlParser):
    media_type = "application/yaml"


class XYamlParser(TaskYamlParser):
    media_type = "application/x-yaml"


class PlainTextRenderer(BaseRenderer):
    """Lets a client that asks for text (Accept: text/plain, as curl and the CLI do) have a
    log: the view answers the text itself; an error answer stays JSON."""

    media_type = "text/plain"
    format = "txt"
    charset = None

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        return JSONRenderer().render(data)


def _invalid(message: str, *, field: str) -> FieldInvalid:
    return FieldInvalid(field, message)


def _int_param(request: Request, name: str, *, lowest: int = 0) -> int | None:
    value = request.query_params.get(name)
    if value in (None, ""):
        return None
    try:
        number = int(str(value))
    except ValueError:
        number = lowest - 1
    if number < lowest:
        raise _invalid(
            _("%(name)s is a whole number from %(lowest)s.") % {"name": name, "lowest": lowest},
            field=name,
        )
    return number


@extend_schema_view(retrieve=extend_schema(operation_id="jobs_retrieve", responses=JobOutput))
class JobViewSet(mixins.RetrieveModelMixin, TenantScopedViewSet[Job]):
    """Jobs of the caller's tenant: programs run to their end on GPUs, billed while they run,
    run again after a lost node. Asynchronous operations answer 202 with the job."""

    model = Job
    owner_field = "tenant"
    serializer_class = JobOutput  # type: ignore[assignment]
    parser_classes = [JSONParser, TaskYamlParser, ApplicationYamlParser, XYamlParser]

    def filter_queryset_extra(self, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.select_related("offering")

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(JobOutput(job_view(self.get_object())).data)

    def _accepted(self, job: Job) -> Response:
        return Response(JobOutput(job_view(job)).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(operation_id="jobs_list", responses={200: JobOutput(many=True)})
    def list(self, request: Request) -> Response:
        """The tenant's jobs, newest first."""
        paginator = Pagination()
        page = paginator.paginate_queryset(self.get_queryset().order_by("-created_at"), request)
        views = job_views(list(page or []))
        return paginator.get_paginated_response([JobOutput(view).data for view in views])

    @extend_schema(
        operation_id="jobs_create",
        request={"application/json": JobCreateInput, "text/yaml": OpenApiTypes.STR},
        parameters=[IDEMPOTENCY_KEY, DRY_RUN_PARAM],
        responses={
            200: OpenApiResponse(
                response=JobDryRunOutput,
                description="A dry run (dry_run: true, or ?dry_run=true for a task YAML): the "
                "quote, any refusal, and what of the task would not be honoured.",
            ),
            202: JobOutput,
            **errors(402, 409, also=ACCOUNT_LIMITS),
            **on_hold_error(),
        },
        description="Submit a job: JSON fields, or a SkyPilot task YAML as it is "
        "(Content-Type: text/yaml; `resources.accelerators`, `num_nodes`, `envs`, `setup`, "
        "`run`, `workdir`); what of the task cannot be honoured is listed in `notes`. "
        "`?dry_run=true` quotes either without creating anything.",
    )
    def create(self, request: Request) -> Response:
        user = signed_in_user(request)
        dry_run = dry_run_queried(request)  # a SkyPilot task has no field for it
        if isinstance(request.data, str):
            job_request = _from_task(request.data)
        else:
            data = self.parse(request, JobCreateInput)
            dry_run = dry_run or data["dry_run"]
            job_request = JobRequest(
                offering_id=data["offering"],
                image_id=data["image"],
                command=data.get("command", ""),
                script=data.get("script", ""),
                name=data.get("name", ""),
                node_count=data["node_count"],
                env=data.get("env"),
                checkpoint_dir=data.get("checkpoint_dir", ""),
                max_restarts=data["max_restarts"],
                time_limit_minutes=data.get("time_limit_minutes"),
                template=data["template"],
                disks=data.get("disks"),
                nas=data["nas"],
                billing=data["billing"],
                spot_max_wait_minutes=data.get("spot_max_wait_minutes"),
            )
        if dry_run:
            found = order_dry_run(lambda: job_submit(user=user, request=job_request))
            answer = dry_run_answer(*found.parts())
            answer.data["notes"] = list(job_request.notes or [])
            return answer
        job, created = job_submit(
            user=user, request=job_request, idempotency_key=idempotency_key(request)
        )
        if created:
            audit_request(request, "job.submitted", job, offering=job.offering_id)
        return self._accepted(job)

    @extend_schema(
        operation_id="jobs_destroy",
        request=None,
        responses={202: JobOutput, **errors(409)},
        description="Cancel the job: its ranks end now (billing too); its logs, checkpoints "
        "and disks are kept. 409 `wrong_state` once it has ended.",
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        job = job_cancel(job=self.get_object())
        audit_request(request, "job.cancelled", job)
        return self._accepted(job)

    @extend_schema(operation_id="jobs_events_list", responses=JobEventOutput(many=True))
    @action(detail=True, methods=["get"], pagination_class=WholeList)
    def events(self, request: Request, pk: str | None = None) -> Response:
        rows = job_events(self.get_object())
        listed = JobEventOutput(rows, many=True)
        return WholeList().get_paginated_response(listed.data)

    @extend_schema(
        operation_id="jobs_logs_retrieve",
        parameters=[
            OpenApiParameter("rank", int, description="The rank (default 0)."),
            OpenApiParameter("attempt", int, description="An earlier attempt (0 the first)."),
            OpenApiParameter("tail", int, description="Only the last N lines."),
            OpenApiParameter(
                "follow",
                bool,
                description="Stream new lines while the rank runs (at most "
                "JOB_LOG_FOLLOW_S seconds a request; ask again to go on).",
            ),
        ],
        responses={(200, "text/plain"): OpenApiTypes.STR, **errors()},
    )
    @action(detail=True, methods=["get"], renderer_classes=[JSONRenderer, PlainTextRenderer])
    def logs(self, request: Request, pk: str | None = None) -> HttpResponse | StreamingHttpResponse:
        """A rank's output (its current attempt, or one kept after its pod went)."""
        job = self.get_object()
        rank = _int_param(request, "rank") or 0
        tail = _int_param(request, "tail")
        source = log_source(job, rank=rank, attempt=_int_param(request, "attempt"))
        if source is None:
            raise NotFound(_("This job has no such rank or attempt."))
        headers = {"X-Starverse-Attempt": str(source.attempt)}
        response: HttpResponse | StreamingHttpResponse
        if request.query_params.get("follow") in ("1", "true", "yes"):
            stream = log_follow(source, tail=tail, timeout_s=settings.JOB_LOG_FOLLOW_S)
            response = StreamingHttpResponse(stream, content_type="text/plain; charset=utf-8")
            response["X-Accel-Buffering"] = "no"  # a proxy passes lines on as they come
        else:
            response = HttpResponse(
                log_text(source, tail=tail), content_type="text/plain; charset=utf-8"
            )
        for name, value in headers.items():
            response[name] = value
        return response


def _from_task(text: str) -> JobRequest:
    """A SkyPilot task YAML as a job request; what cannot run is a 400 naming the field."""
    try:
        parsed = parse_task(text, catalog_from_db())
    except TaskError as error:
        raise InvalidInput(str(error), code="invalid_task") from None
    order: dict[str, Any] = parsed.order
    return JobRequest(
        offering_id=order["offering"],
        image_id=order["image"],
        script=order.get("script", ""),
        command=order.get("command", ""),
        name=order.get("name", ""),
        node_count=order.get("node_count", 1),
        env=order.get("env"),
        max_restarts=order.get("max_restarts", 3),
        notes=parsed.notes,
    )
