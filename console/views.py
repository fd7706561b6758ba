"""Console pages that read across apps: the public home page (the price list) or, signed in,
the dashboard, the Disks page, and the health check. They sit above every app and change
nothing themselves."""

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.utils import timezone

from billing.selectors import ledger_lines_for_tenant, trial_state, wallet_for_tenant
from compute.preemption import preemption_rates
from fleet.models import Region
from instances.autostop import auto_stop_savings
from instances.choices import InstanceStatus
from instances.models import Instance
from instances.selectors import calculator_offerings, spend_per_hour_fen
from starverse.core.console import page_user
from starverse.core.tenancy import scope_to_user
from starverse.core.text import localized
from storage.billing import days_left, open_arrears, prices, storage_day_fen
from storage.choices import StorageKind
from storage.nas import nas_for_tenant
from storage.selectors import tenant_disks


@dataclass(frozen=True)
class PriceRow:
    """One offering of the public price list, in the reader's language."""

    key: str
    name: str
    kind: str
    gpu_model: str
    gpu_memory_gb: int
    gpus: int
    cpu_cores: int
    memory_gb: int
    local_disk_gb: int
    hour_fen: int
    month_fen: int | None
    trial_hour_fen: int | None
    gpu_hour_fen: int  # the hourly price of one of its GPUs, for the "from" figures
    spot_hour_fen: int | None = None  # interruptible: None when not offered as spot
    spot_rate: float | None = None  # its GPU model's preemptions per spot rental, lately


@dataclass(frozen=True)
class StorageRow:
    kind: str
    name: str
    gb_day_fen: int


def home(request: HttpRequest) -> HttpResponse:
    """Signed in: the dashboard. A visitor: the public home page, with the price list of the
    active catalog as Rent and the cost calculator read it, storage prices, and the way in."""
    if request.user.is_authenticated:
        return redirect("console:dashboard")
    rates = preemption_rates()
    rows = [
        PriceRow(
            key=o.slug or o.id,
            name=localized(o, "name"),
            kind=o.kind,
            gpu_model=o.gpu_model.name,
            gpu_memory_gb=o.gpu_model.memory_gb,
            gpus=o.gpu_count,
            cpu_cores=o.cpu_cores,
            memory_gb=o.memory_gb,
            local_disk_gb=o.local_disk_gb,
            hour_fen=o.price_per_hour_fen,
            month_fen=o.price_per_month_fen,
            trial_hour_fen=o.trial_price_per_hour_fen,
            gpu_hour_fen=-(-o.price_per_hour_fen // o.gpu_count),  # rounded up: never under-quoted
            spot_hour_fen=o.spot_price_per_hour_fen,
            spot_rate=rates.get(o.gpu_model_id),
        )
        for o in calculator_offerings()
    ]
    # the cheapest GPU-hour of each GPU model, in the catalog's order
    cheapest: dict[str, PriceRow] = {}
    for row in rows:
        if row.gpu_model not in cheapest or row.gpu_hour_fen < cheapest[row.gpu_model].gpu_hour_fen:
            cheapest[row.gpu_model] = row
    storage_prices = prices()
    storage = [
        StorageRow(kind=kind.value, name=str(kind.label), gb_day_fen=storage_prices[kind.value])
        for kind in StorageKind
        if kind.value in storage_prices
    ]
    return render(
        request,
        "console/home.html",
        {
            "rows": rows,
            "cheapest": list(cheapest.values()),
            "storage": storage,
            "trial_credit_fen": settings.TRIAL_CREDIT_FEN,
            "trial_after_verification": settings.TRIAL_REQUIRES_VERIFICATION,
        },
    )


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    wallet = wallet_for_tenant(request.user.tenant_id)  # type: ignore[union-attr]
    recent = ledger_lines_for_tenant(request.user.tenant_id)[:5]  # type: ignore[union-attr]
    running = (
        scope_to_user(Instance.objects.all(), request.user, "tenant")
        .filter(status=InstanceStatus.RUNNING)
        .select_related("offering__gpu_model")
        .order_by("-running_since", "-created_at")
    )
    # one aggregate for the count and the GPUs; with nothing running (most visits) the spend,
    # the first rows and the idle warnings are known to be empty without asking
    totals = running.aggregate(n=Count("id"), gpus=Sum("offering__gpu_count"))
    running_count, running_gpus = totals["n"], totals["gpus"]
    spend = (
        spend_per_hour_fen([request.user.tenant_id]).get(request.user.tenant_id, 0)  # type: ignore[union-attr]
        if running_count
        else 0
    )
    runway_minutes = max(wallet.total_fen, 0) * 60 // spend if spend > 0 else None
    return render(
        request,
        "console/dashboard.html",
        {
            "wallet": wallet,
            "recent": recent,
            "running": list(running[:5]) if running_count else [],
            "running_count": running_count,
            "running_gpus": running_gpus,
            "spend_per_hour_fen": spend,
            "runway_minutes": runway_minutes,
            "trial": trial_state(request.user),  # type: ignore[arg-type]
            "savings": auto_stop_savings(request.user.tenant_id),  # type: ignore[union-attr]
            "idle_warned": list(
                running.filter(stop_policy__idle_stop_due_at__isnull=False)
                .select_related("stop_policy")
                .order_by("stop_policy__idle_stop_due_at")
            )
            if running_count
            else [],
            "active": "dashboard",
        },
    )


def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico: pages without an icon link of their own (the operator admin, the API docs)
    make browsers ask for it; the console's icon answers rather than a 404 in their console."""
    return redirect(static("img/favicon.svg"), permanent=True)


@login_required
def disk_list(request: HttpRequest) -> HttpResponse:
    """The Disks page: cloud disks with the instances they can be attached to, the shared NAS
    and the countdown of unpaid storage."""
    user = page_user(request)
    tenant_id = user.tenant_id
    disks = list(tenant_disks(user).select_related("instance", "region").order_by("name"))
    arrears = open_arrears(tenant_id)
    price = prices()
    nas = nas_for_tenant(tenant_id)
    stopped = scope_to_user(Instance.objects.all(), request.user, "tenant").filter(
        status__in=(InstanceStatus.STOPPED, InstanceStatus.FAILED, InstanceStatus.QUEUED)
    )
    return render(
        request,
        "storage/disks.html",
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
            "regions": list(Region.objects.filter(active=True).order_by("name")),
            "wallet": wallet_for_tenant(tenant_id),
        },
    )
