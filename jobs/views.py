"""Console pages for jobs: the list, the submit form, a job's page with its log viewer, and
cancel. They read through jobs.selectors, show a job as the API does (job_view), and change
things only through jobs.services; the look, the order token and the role checks are the
cluster pages' (clusters.views)."""

from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET, require_POST

from billing.models import Wallet
from billing.selectors import wallet_for_tenant
from compute.admission import ORDER_KEY_PREFIX
from compute.models import Image, Offering
from instances.choices import InstanceStatus
from instances.selectors import availability, offering_price_now
from jobs.choices import ENDED, JobBilling, JobStatus
from jobs.models import Job
from jobs.selectors import (
    LogSource,
    job_events,
    job_view,
    jobs_cost_fen,
    log_source,
    log_text,
)
from jobs.services import MAX_RESTARTS, MAX_TIME_LIMIT_MINUTES, JobRequest, job_cancel, job_submit
from starverse.accounts.audit import audit_request
from starverse.core.console import form_token, page_user, run_change
from starverse.core.errors import FieldInvalid, IdempotencyConflict, ServiceError
from starverse.core.roles import ORDERERS, is_manager, role_of
from starverse.core.tenancy import get_for_user, scope_to_user
from starverse.core.text import localized
from storage.models import Disk
from storage.nas import nas_for_tenant
from storage.selectors import free_disks

J = JobStatus
# The log viewer's window: the last lines of an attempt (the download has all of them).
LOG_TAIL = 200
LOG_TAIL_MAX = 5000
# The form's fields a service refusal may name (FieldInvalid.field); "script" is the command box.
FORM_FIELDS = {
    "offering": "offering",
    "image": "image",
    "name": "name",
    "command": "command",
    "script": "command",
    "env": "env",
    "checkpoint_dir": "checkpoint_dir",
    "max_restarts": "max_restarts",
    "time_limit_minutes": "time_limit_minutes",
    "nas": "nas",
    "disks": "disks",
}
EXAMPLE_COMMAND = 'python train.py --resume-from "$STARVERSE_CHECKPOINT_DIR"'


class JobForm(forms.Form):
    offering = forms.ChoiceField(
        error_messages={
            "required": gettext_lazy("Choose GPUs for the job."),
            "invalid_choice": gettext_lazy("That offering is no longer available; choose another."),
        }
    )
    image = forms.ChoiceField(
        error_messages={
            "required": gettext_lazy("Choose an image."),
            "invalid_choice": gettext_lazy("That image is no longer available; choose another."),
        }
    )
    name = forms.CharField(max_length=100, required=False, strip=True)
    command = forms.CharField(
        max_length=64 * 1024,
        strip=False,
        error_messages={"required": gettext_lazy("Enter the command the job runs.")},
    )
    env = forms.CharField(required=False, strip=False)
    checkpoint_dir = forms.CharField(max_length=255, required=False, strip=True)
    billing = forms.ChoiceField(choices=JobBilling.choices, required=False)
    max_restarts = forms.IntegerField(
        min_value=0,
        max_value=MAX_RESTARTS,
        error_messages={
            "required": gettext_lazy("Enter how many times it may run again (0 for never)."),
            "invalid": gettext_lazy("Restarts are a whole number."),
            "min_value": gettext_lazy("Restarts are 0 or more."),
            "max_value": gettext_lazy("At most %(limit_value)s restarts."),
        },
    )
    time_limit_minutes = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_TIME_LIMIT_MINUTES,
        error_messages={
            "invalid": gettext_lazy("The time limit is a whole number of minutes."),
            "min_value": gettext_lazy("The time limit is at least 1 minute."),
            "max_value": gettext_lazy("The time limit is at most 90 days."),
        },
    )
    nas = forms.BooleanField(required=False)
    disks = forms.MultipleChoiceField(
        required=False,
        error_messages={
            "invalid_choice": gettext_lazy("That disk is no longer free; choose another."),
        },
    )
    token = forms.RegexField(regex=r"^[A-Za-z0-9_-]{16,64}$")

    def __init__(
        self,
        *args: Any,
        offerings: list[Offering],
        images: list[Image],
        disks: list[Disk],
        **kw: Any,
    ) -> None:
        super().__init__(*args, **kw)
        self._offer("offering", [(o.id, localized(o, "name")) for o in offerings])
        self._offer("image", [(i.id, localized(i, "name")) for i in images])
        self._offer("disks", [(d.id, d.name) for d in disks])

    def _offer(self, name: str, choices: list[tuple[str, str]]) -> None:
        found = self.fields[name]
        assert isinstance(found, forms.ChoiceField)  # the choice fields declared above
        found.choices = choices

    def clean_env(self) -> dict[str, str]:
        """KEY=VALUE lines; blank lines and # comments are skipped. The names are the
        service's to check (jobs.services._check_env)."""
        env: dict[str, str] = {}
        for number, line in enumerate(str(self.cleaned_data.get("env") or "").splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, equals, value = line.partition("=")
            if not equals or not key.strip():
                raise forms.ValidationError(
                    _("Line %(number)s is not KEY=VALUE.") % {"number": number}
                )
            env[key.strip()] = value
        return env


@dataclass
class _Offer:
    """What the submit form offers: every active offering (a job runs on one node: 1 to 8
    GPUs, or a whole node) with what is free now, the images, the free cloud disks, and
    whether the account has a NAS."""

    offerings: list[Offering]
    images: list[Image]
    wallet: Wallet
    counts: dict[str, int]
    disks: list[Disk]
    has_nas: bool


@dataclass
class _Shown:
    """The form as the page shows it: the choices, the token (the idempotency key of the job
    it submits), and why the last submission was refused, at a field or on top."""

    chosen: dict[str, str]
    token: str
    nas: bool
    disks: list[str] = field(default_factory=list)
    error: str | None = None
    field_errors: dict[str, str] = field(default_factory=dict)
    http_status: int = 200


def _offer_for(request: HttpRequest) -> _Offer:
    user = page_user(request)
    offerings = list(
        Offering.objects.filter(active=True)
        .select_related("gpu_model")
        .order_by("gpu_model__name", "gpu_count", "price_per_hour_fen")
    )
    return _Offer(
        offerings=offerings,
        images=list(Image.objects.usable_by(user.tenant_id)),
        wallet=wallet_for_tenant(user.tenant_id),
        counts=availability(offerings),
        disks=free_disks(user),
        has_nas=nas_for_tenant(user.tenant_id) is not None,
    )


def _form_new(request: HttpRequest, offer: _Offer) -> _Shown:
    """A blank form: the offering asked for (?offering=) or the cheapest free one, the first
    image, 3 restarts, the NAS when the account has one, and a new token."""
    wanted = request.GET.get("offering", "")
    # ?demo=1 under make run: the emulator's simulated trainer (JOB_DEMO_COMMAND)
    demo = settings.JOB_DEMO_COMMAND if request.GET.get("demo") else ""
    by_price = sorted(offer.offerings, key=lambda o: o.price_per_hour_fen)
    free = [o for o in by_price if offer.counts.get(o.id, 0) > 0] or by_price
    default = wanted if any(o.id == wanted for o in offer.offerings) else ""
    return _Shown(
        chosen={
            "offering": default or (free[0].id if free else ""),
            "image": offer.images[0].id if offer.images else "",
            "name": "demo" if demo else "",
            "command": demo,
            "env": "",
            "checkpoint_dir": "",
            "max_restarts": "3",
            "time_limit_minutes": "",
        },
        token=form_token(),
        nas=offer.has_nas,
    )


def _form_as_posted(request: HttpRequest) -> _Shown:
    """The submitted form, to show again as it was sent."""
    chosen = {
        key: str(request.POST.get(key, ""))
        for key in ("offering", "image", "name", "checkpoint_dir", "max_restarts", "billing")
    }
    chosen["time_limit_minutes"] = str(request.POST.get("time_limit_minutes", ""))
    chosen["command"] = str(request.POST.get("command", ""))
    chosen["env"] = str(request.POST.get("env", ""))
    return _Shown(
        chosen=chosen,
        token=str(request.POST.get("token", "")),
        nas=bool(request.POST.get("nas")),
        disks=request.POST.getlist("disks"),
    )


def _job_request(data: dict[str, Any]) -> JobRequest:
    return JobRequest(
        offering_id=data["offering"],
        image_id=data["image"],
        command=data["command"],
        name=data["name"],
        env=data["env"],
        checkpoint_dir=data["checkpoint_dir"],
        max_restarts=data["max_restarts"],
        time_limit_minutes=data["time_limit_minutes"],
        disks=data["disks"],
        nas=data["nas"],
        billing=data.get("billing") or JobBilling.HOURLY,
    )


@login_required
def job_new(request: HttpRequest) -> HttpResponse:
    """Submit a job. A submitted form submits its job once (a second submission of it finds
    the same job) and leads to the job; a refused one comes back with the reason at its field
    (or on top) and everything kept."""
    offer = _offer_for(request)
    if request.method != "POST":
        return _submit_page(request, offer, _form_new(request, offer))
    form = JobForm(request.POST, offerings=offer.offerings, images=offer.images, disks=offer.disks)
    shown = _form_as_posted(request)
    if not form.is_valid():
        shown.field_errors = {
            name: " ".join(str(e) for e in errors) for name, errors in form.errors.items()
        }
        if "token" in form.errors:
            shown.token = form_token()
            shown.field_errors.pop("token")
            shown.error = _("The form had expired; check it and submit it again.")
        shown.http_status = 400
        return _submit_page(request, offer, shown)
    data = form.cleaned_data
    try:
        job, created = job_submit(
            user=page_user(request),
            request=_job_request(data),
            idempotency_key=ORDER_KEY_PREFIX + data["token"],
        )
    except IdempotencyConflict as conflict:
        # A stale copy of a form that already submitted a different job.
        shown.error = _(
            "This form was already used to submit a different job. Check your jobs, then "
            "submit again if you still want this one."
        )
        shown.token, shown.http_status = form_token(), conflict.status_code
    except ServiceError as failure:
        # Nothing was submitted: the same token stays valid for the corrected job.
        shown.http_status = failure.status_code
        name = FORM_FIELDS.get(failure.field) if isinstance(failure, FieldInvalid) else None
        if name:
            shown.field_errors[name] = failure.message
        else:
            shown.error = failure.message
    else:
        if created:
            audit_request(request, "job.submitted", job, offering=job.offering_id)
            messages.success(request, _("Job “%(name)s” submitted.") % {"name": job.name})
        else:
            messages.info(request, _("This job had already been submitted; here it is."))
        return redirect("jobs:detail", job.pk)
    return _submit_page(request, offer, shown)


def _submit_page(request: HttpRequest, offer: _Offer, shown: _Shown) -> HttpResponse:
    groups: dict[str, dict[str, Any]] = {}
    for o in offer.offerings:
        group = groups.setdefault(o.gpu_model_id, {"model": o.gpu_model, "rows": []})
        group["rows"].append(
            {
                "offering": o,
                # an hour as charged now: at the trial price while trial credit pays (as Rent)
                "now": offering_price_now(o, offer.wallet.promo_free_fen),
                "available": offer.counts.get(o.id, 0),
            }
        )
    context = {
        "active": "jobs",
        "groups": list(groups.values()),
        "images": offer.images,
        "disks": offer.disks,
        "has_nas": offer.has_nas,
        "wallet": offer.wallet,
        "chosen": shown.chosen,
        "nas_checked": shown.nas,
        "selected_disks": shown.disks,
        "token": shown.token,
        "error": shown.error,
        "field_errors": shown.field_errors,
        "example": EXAMPLE_COMMAND,
        "max_restarts": MAX_RESTARTS,
        "demo": bool(settings.JOB_DEMO_COMMAND),
    }
    return render(request, "jobs/new.html", context, status=shown.http_status)


def _status_labels() -> dict[str, str]:
    return {value: str(label) for value, label in JobStatus.choices}


def _user_jobs(request: HttpRequest) -> QuerySet[Job]:
    return scope_to_user(Job.objects.all(), request.user, "tenant").select_related(
        "offering__gpu_model", "image"
    )


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    """The tenant's jobs, newest first, each with what it has cost."""
    page = Paginator(_user_jobs(request).order_by("-created_at"), 50).get_page(
        request.GET.get("page")
    )
    jobs = list(page.object_list)
    spent = jobs_cost_fen(jobs)  # the whole page in one query
    return render(
        request,
        "jobs/list.html",
        {
            "active": "jobs",
            "page": page,
            "rows": [(job, spent.get(job.pk, 0)) for job in jobs],
            "status_labels": _status_labels(),
        },
    )


def _may_cancel(request: HttpRequest, job: Job) -> bool:
    """Whether the button shows: the services refuse the rest (run_change checks the role)."""
    if role_of(request.user) not in ORDERERS:
        return False
    return is_manager(request.user) or job.created_by_id == request.user.pk


def _attempt_asked(request: HttpRequest, job: Job) -> int:
    try:
        asked = int(request.GET.get("attempt", job.restarts))
    except ValueError:
        asked = job.restarts
    return min(max(asked, 0), job.restarts)


@login_required
def job_detail(request: HttpRequest, pk: str) -> HttpResponse:
    """A job's page: what it is, where it runs, what happened, and its output."""
    job = get_for_user(_user_jobs(request), request.user, "tenant", pk)
    view = job_view(job)
    ended = job.status in ENDED
    attempt = _attempt_asked(request, job)
    latest = attempt >= job.restarts
    source = log_source(job, rank=0, attempt=None if latest else attempt)
    return render(
        request,
        "jobs/detail.html",
        {
            "active": "jobs",
            "job": job,
            "info": view,
            "events": job_events(job),
            "status_labels": _status_labels(),
            "rank_labels": {value: str(label) for value, label in InstanceStatus.choices},
            "ended": ended,
            "can_cancel": not ended and job.status != J.CANCELLING,
            "may_cancel": _may_cancel(request, job),
            "attempt": attempt,
            "attempts": list(range(job.restarts + 1)),
            "log_live": not ended and latest,
            # the latest run is asked for without its number: it may not have started yet
            "log_query": "" if latest else f"attempt={attempt}&",
            "log_text": _log_lines(source),
            "log_tail": LOG_TAIL,
            "tz": timezone.get_current_timezone_name(),
        },
    )


def _log_lines(source: LogSource | None) -> str:
    """The viewer's first lines, in the page (the script follows them from there)."""
    return "" if source is None else log_text(source, tail=LOG_TAIL)


@login_required
@require_GET
def job_logs(request: HttpRequest, pk: str) -> HttpResponse:
    """Rank 0's output of an attempt (?attempt=, the latest by default) as text: its last
    ?tail= lines (200) for the viewer, or all of it as a file with ?download=1.
    X-Starverse-Live says whether more may come (the viewer stops asking when it is 0)."""
    job = get_for_user(Job.objects.all(), request.user, "tenant", pk)
    attempt: int | None = None
    if request.GET.get("attempt", "").isdigit():
        attempt = int(request.GET["attempt"])
    source = log_source(job, rank=0, attempt=attempt)
    if source is None:
        raise Http404
    download = request.GET.get("download") == "1"
    tail: int | None = None
    if not download:
        asked = request.GET.get("tail", "")
        tail = min(int(asked), LOG_TAIL_MAX) if asked.isdigit() else LOG_TAIL
    # (read from what the worker shipped: the web tier never asks the cluster)
    response = HttpResponse(log_text(source, tail=tail), content_type="text/plain; charset=utf-8")
    response["X-Starverse-Attempt"] = str(source.attempt)
    # more may come: its pod writes, or the job's latest run has yet to start or end
    more = job.status not in ENDED and (source.live or source.attempt >= job.restarts)
    response["X-Starverse-Live"] = "1" if more else "0"
    response["X-Starverse-Status"] = job.status
    response["Cache-Control"] = "no-store"
    if download:
        filename = f"{job.id}-attempt-{source.attempt}.log"
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
@require_POST
def job_cancel_view(request: HttpRequest, pk: str) -> HttpResponse:
    """Cancel the job; once it has ended the service refuses, and the page says why."""
    job = get_for_user(Job.objects.all(), request.user, "tenant", pk)
    run_change(
        request,
        job,
        lambda: audit_request(request, "job.cancelled", job_cancel(job=job)),
        _("Cancelling “%(name)s”: billing has stopped; its logs, checkpoints and disks are kept.")
        % {"name": job.name},
    )
    return redirect("jobs:detail", job.pk)
