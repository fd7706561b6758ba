"""Console pages that read across apps: the home redirect, the dashboard, the Disks page, and
the health check. They sit above every app and change nothing themselves."""

from django.contrib.auth.decorators import login_required
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.utils import timezone

from billing.selectors import ledger_lines_for_tenant, trial_state, wallet_for_tenant
from fleet.models import Region
from instances.autostop import auto_stop_savings
from instances.choices import InstanceStatus
from instances.models import Instance
from instances.selectors import spend_per_hour_fen
from starverse.core.console import page_user
from starverse.core.tenancy import scope_to_user
from storage.billing import days_left, open_arrears, prices, storage_day_fen
from storage.nas import nas_for_tenant
from storage.selectors import tenant_disks


def home(request: HttpRequest) -> HttpResponse:
    return redirect("console:dashboard" if request.user.is_authenticated else "accounts:login")


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
    running_gpus = running.aggregate(n=Sum("offering__gpu_count"))["n"]
    spend = spend_per_hour_fen([request.user.tenant_id]).get(request.user.tenant_id, 0)  # type: ignore[union-attr]
    runway_minutes = max(wallet.total_fen, 0) * 60 // spend if spend > 0 else None
    return render(
        request,
        "console/dashboard.html",
        {
            "wallet": wallet,
            "recent": recent,
            "running": running[:5],
            "running_count": running.count(),
            "running_gpus": running_gpus,
            "spend_per_hour_fen": spend,
            "runway_minutes": runway_minutes,
            "trial": trial_state(request.user),  # type: ignore[arg-type]
            "savings": auto_stop_savings(request.user.tenant_id),  # type: ignore[union-attr]
            "idle_warned": list(
                running.filter(stop_policy__idle_stop_due_at__isnull=False)
                .select_related("stop_policy")
                .order_by("stop_policy__idle_stop_due_at")
            ),
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
