from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from billing.selectors import ledger_for_tenant, wallet_for_tenant


@login_required
def billing(request: HttpRequest) -> HttpResponse:
    tenant_id = request.user.tenant_id  # type: ignore[union-attr]
    page = Paginator(ledger_for_tenant(tenant_id), 25).get_page(request.GET.get("page"))
    return render(
        request,
        "billing/billing.html",
        {"wallet": wallet_for_tenant(tenant_id), "page": page, "active": "billing"},
    )
