"""Console shell pages: the home redirect, the dashboard and the health check."""

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.db.models import Q, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render

from billing.selectors import ledger_for_tenant, wallet_for_tenant
from instances.choices import InstanceStatus
from instances.models import Instance
from starverse.core.tenancy import scope_to_user


def home(request: HttpRequest) -> HttpResponse:
    return redirect("console:dashboard" if request.user.is_authenticated else "accounts:login")


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    wallet = wallet_for_tenant(request.user.tenant_id)  # type: ignore[union-attr]
    recent = ledger_for_tenant(request.user.tenant_id)[:5]  # type: ignore[union-attr]
    running = (
        scope_to_user(Instance.objects.all(), request.user, "tenant")
        .filter(status=InstanceStatus.RUNNING)
        .select_related("offering__gpu_model")
        .order_by("-running_since", "-created_at")
    )
    # The spend rate is the hourly price of what is running now (per-minute billing), so it is
    # right from the first minute; the runway is how long the balance lasts at that rate.
    totals = running.aggregate(
        running_gpus=Sum("offering__gpu_count"),
        running_list_fen=Sum("offering__price_per_hour_fen", filter=Q(billing="hourly")),
    )
    spend = totals["running_list_fen"] or 0
    runway_minutes = max(wallet.total_fen, 0) * 60 // spend if spend > 0 else None
    return render(
        request,
        "console/dashboard.html",
        {
            "wallet": wallet,
            "recent": recent,
            "running": running[:5],
            "running_count": running.count(),
            **totals,
            "spend_per_hour_fen": spend,
            "runway_minutes": runway_minutes,
            "active": "dashboard",
        },
    )


def healthz(request: HttpRequest) -> JsonResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
