from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, include, path, re_path
from django.views.i18n import set_language
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from billing.webhooks import stripe_webhook
from console import views as console_views
from endpoints.api import gateway as endpoint_gateway
from instances import views as instances_views
from instances.api import gateway
from starverse.core.api import errors

# Admin pages of models that moved app (fleet and storage came out of instances and datasets,
# the catalog and the allocations went to the compute core): the old addresses keep working,
# by (old app, model) → new app. 308 keeps the method and body of a form post.
FLEET_MODELS = ("gpumodel", "node", "gpu", "gpusample", "gpurollup", "nodeevent", "healthrule")
MOVED_ADMIN = {
    **{
        ("instances", model): "fleet"
        for model in (
            "gpumodel",
            "node",
            "gpu",
            "gpusample",
            "gpurollup",
            "nodeevent",
            "healthrule",
        )
    },
    **{
        (old, model): "storage"
        for old in ("instances", "datasets")
        for model in ("disk", "storageprice", "storagearrears", "sharedstorage")
    },
    **{("instances", model): "compute" for model in ("offering", "image", "tenantlimits")},
    ("fleet", "allocation"): "compute",
}


def moved_admin(request: HttpRequest, app: str, model: str, rest: str) -> HttpResponse:
    query = request.META.get("QUERY_STRING", "")
    target = f"/admin/{MOVED_ADMIN[app, model]}/{model}/{rest}" + (f"?{query}" if query else "")
    return HttpResponse(status=308, headers={"Location": target})


def _moved_admin_routes() -> list[URLPattern]:
    """One route per old app, naming only the models that left it (a model of the same name
    that lives there now is the admin's own page)."""
    models: dict[str, list[str]] = {}
    for app, model in sorted(MOVED_ADMIN):
        models.setdefault(app, []).append(model)
    return [
        re_path(rf"^admin/(?P<app>{app})/(?P<model>{'|'.join(names)})/(?P<rest>.*)$", moved_admin)
        for app, names in models.items()
    ]


# The API first, the instances' routes first in it: resolving an address tries every route
# before its own, and the instance list is the API's hottest read (no route of the console's
# starts with api/v1/, and no two of these apps' routes overlap).
api_v1 = [
    path("", include("instances.api.urls")),
    path("", include("starverse.accounts.api.urls")),
    path("", include("billing.api.urls")),
    path("", include("fleet.api.urls")),
    path("", include("storage.api.urls")),
    path("", include("clusters.api.urls")),
    path("", include("jobs.api.urls")),
    path("", include("endpoints.api.urls")),
    path("", include("datasets.api.urls")),
    path("", include("teams.api.urls")),
    path("", include("events.api.urls")),
]

urlpatterns = [
    path("api/v1/", include((api_v1, "api"), namespace="api")),
    path("", console_views.home, name="home"),
    path("favicon.ico", console_views.favicon, name="favicon"),
    path("webhooks/stripe", stripe_webhook, name="stripe-webhook"),
    # every gateway host: endpoints' by API key, instances' by the owner's cookie or a share
    re_path(r"^gateway/auth(?P<rest>/.*)?$", endpoint_gateway.forward_auth, name="gateway-auth"),
    path("gateway/login", gateway.gateway_login, name="gateway-login"),
    path("console/", include("console.urls")),
    path("console/", include("instances.urls")),
    path("console/", include("events.urls")),
    path("", include("clusters.urls")),
    path("", include("jobs.urls")),
    path("", include("endpoints.urls")),
    path("accounts/", include("starverse.accounts.urls")),
    # public; its Starverse column reads the catalog, so the page is the catalog app's
    path("billing/calculator/", instances_views.calculator, name="calculator"),
    path("billing/", include("billing.urls")),
    path("teams/", include("teams.urls")),
    path("i18n/setlang/", set_language, name="set_language"),
    *_moved_admin_routes(),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    # last: every other address under /api/ is the API's JSON 404, never an HTML page (but for
    # the two pages above without their slash, which CommonMiddleware redirects to it)
    re_path(r"^api/(?!(?:docs|schema)$)", errors.api_not_found, name="api-not-found"),
]

# Django's own answers (an unhandled error, a bad Host): JSON under /api/, the usual pages
# elsewhere (starverse.core.api.errors).
handler400 = errors.bad_request
handler404 = errors.api_not_found
handler500 = errors.server_error
