"""The gateway's authorization check (`/gateway/auth`) for every host: endpoint hosts are
answered here (endpoints.gateway, by API key), all others by the instances' check."""

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from endpoints.gateway import endpoint_check
from instances.api.gateway import forward_auth as instance_forward_auth


def _first(value: str) -> str:
    return value.split(",")[0].strip()


@csrf_exempt
def forward_auth(request: HttpRequest, rest: str | None = None) -> HttpResponse:
    meta = request.META
    host = _first(meta.get("HTTP_X_FORWARDED_HOST") or meta.get("HTTP_HOST") or "")
    verdict = endpoint_check(host=host, authorization=meta.get("HTTP_AUTHORIZATION", ""))
    if verdict is None:
        return instance_forward_auth(request, rest)
    response = HttpResponse(verdict.body, status=verdict.status)
    for key, value in verdict.headers.items():
        response[key] = value
    response["Cache-Control"] = "no-store"
    return response
