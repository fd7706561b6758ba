from django.http import HttpRequest, JsonResponse
from django.urls import path

from instances.models import Instance
from starverse.urls import urlpatterns as platform


def bare_instances(request: HttpRequest) -> JsonResponse:
    """The baseline: 20 rows straight from the ORM as JSON, no auth, no serializers."""
    rows = list(
        Instance.objects.filter(tenant_id=request.GET["tenant"]).values(
            "id", "name", "status", "cost_fen", "created_at"
        )[:20]
    )
    return JsonResponse({"results": rows})


urlpatterns = [path("bench/bare-instances", bare_instances), *platform]
