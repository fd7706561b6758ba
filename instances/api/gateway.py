"""The gateway's two endpoints on the console (instances.gateway says how they fit together):

- `/gateway/auth`: the proxy's authorization check (Envoy's ext_authz, Traefik's ForwardAuth,
  ingress-nginx's auth-url), asked before every request to an instance's address. It reads the
  original request from X-Forwarded-Host / X-Forwarded-Uri / X-Forwarded-Method when the proxy
  sends them (Traefik, nginx), else from the check request itself (Envoy keeps the Host and
  appends the original path to this one). 200 lets the request through with the headers to add
  upstream; any other answer goes back to the browser. It only reads the database.
- `/gateway/login`: the console hop that turns the owner's console session into a cookie of
  the gateway address; everyone else gets the console's 404."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from instances.gateway import cookie_name, gateway_check, gateway_login_target
from starverse.core.console import page_user
from starverse.core.errors import NotFound


def _first(value: str) -> str:
    # a proxy chain may list several values: the first is what the browser asked
    return value.split(",")[0].strip()


@csrf_exempt
def forward_auth(request: HttpRequest, rest: str | None = None) -> HttpResponse:
    meta = request.META
    host = _first(meta.get("HTTP_X_FORWARDED_HOST") or meta.get("HTTP_HOST") or "")
    uri = meta.get("HTTP_X_FORWARDED_URI") or ""
    if not uri:
        query = meta.get("QUERY_STRING", "")
        uri = (rest or "/") + (f"?{query}" if query else "")
    method = _first(meta.get("HTTP_X_FORWARDED_METHOD") or request.method or "GET")
    verdict = gateway_check(
        host=host, uri=uri, method=method, cookie=request.COOKIES.get(cookie_name())
    )
    response = HttpResponse(verdict.body, status=verdict.status)
    for key, value in verdict.headers.items():
        response[key] = value
    response["Cache-Control"] = "no-store"
    if verdict.cookie is not None:
        response.set_cookie(
            cookie_name(),
            verdict.cookie,
            max_age=settings.GATEWAY_SESSION_HOURS * 3600,
            path="/",
            secure=settings.GATEWAY_SCHEME == "https",
            httponly=True,
            samesite="Lax",
        )
    return response


@login_required
def gateway_login(request: HttpRequest) -> HttpResponse:
    try:
        target = gateway_login_target(user=page_user(request), next_url=request.GET.get("next", ""))
    except NotFound:
        raise Http404 from None
    return HttpResponse(status=302, headers={"Location": target, "Cache-Control": "no-store"})
