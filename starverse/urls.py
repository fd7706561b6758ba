from django.contrib import admin
from django.urls import include, path
from django.views.i18n import set_language
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from billing.webhooks import stripe_webhook
from starverse.core import views as core_views

api_v1 = [
    path("", include("starverse.accounts.api.urls")),
    path("", include("billing.api.urls")),
    path("", include("instances.api.urls")),
    path("", include("datasets.api.urls")),
]

urlpatterns = [
    path("", core_views.home, name="home"),
    path("healthz", core_views.healthz, name="healthz"),
    path("webhooks/stripe", stripe_webhook, name="stripe-webhook"),
    path("console/", include("starverse.core.urls")),
    path("console/", include("instances.urls")),
    path("accounts/", include("starverse.accounts.urls")),
    path("billing/", include("billing.urls")),
    path("i18n/setlang/", set_language, name="set_language"),
    path("admin/", admin.site.urls),
    path("api/v1/", include((api_v1, "api"), namespace="api")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]
