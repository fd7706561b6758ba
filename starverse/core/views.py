"""Console shell pages: the dashboard and the pages later capabilities fill."""

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext_lazy as _

from billing.selectors import ledger_for_tenant, wallet_for_tenant

# Pages whose capability has not landed yet: they say so rather than show made-up data.
COMING = {
    "rent": (
        _("Rent"),
        _("One-click rental of 8×H100 / 8×A100 nodes and 1–8 GPU cloud instances."),
    ),
    "instances": (_("Instances"), _("Your running and stopped instances, with SSH and Jupyter.")),
    "disks": (_("Disks"), _("Persistent cloud disks that outlive instances.")),
    "datasets": (_("Datasets"), _("The read-only public pool of datasets and models at /public.")),
}


def home(request: HttpRequest) -> HttpResponse:
    return redirect("console:dashboard" if request.user.is_authenticated else "accounts:login")


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    wallet = wallet_for_tenant(request.user.tenant_id)  # type: ignore[union-attr]
    recent = ledger_for_tenant(request.user.tenant_id)[:5]  # type: ignore[union-attr]
    return render(
        request,
        "console/dashboard.html",
        {"wallet": wallet, "recent": recent, "active": "dashboard"},
    )


def coming(page: str):  # type: ignore[no-untyped-def]
    title, summary = COMING[page]

    @login_required
    def view(request: HttpRequest) -> HttpResponse:
        return render(
            request, "console/coming.html", {"title": title, "summary": summary, "active": page}
        )

    view.__name__ = f"coming_{page}"
    return view


def healthz(request: HttpRequest) -> JsonResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
