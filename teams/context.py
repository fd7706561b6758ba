from typing import Any

from django.http import HttpRequest

from starverse.accounts.models import Tenant, TenantKind


def team_switch(request: HttpRequest) -> dict[str, Any]:
    """The console's switch at the top: the person's own account and each of their teams."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    teams = list(
        Tenant.objects.filter(kind=TenantKind.TEAM, memberships__user_id=user.pk)
        .order_by("name")
        .values_list("id", "name")
    )
    acting = user.tenant_id if user.tenant_id != user.personal_tenant_id else ""
    return {"team_switch": teams, "acting_team": acting}
