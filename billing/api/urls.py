from django.urls import path
from rest_framework.routers import SimpleRouter

from billing.api import views

router = SimpleRouter(trailing_slash=False)
router.register("billing/ledger", views.LedgerViewSet, basename="ledger")
router.register("billing/topups", views.TopUpViewSet, basename="topup")

urlpatterns = [
    path("billing/balance", views.BalanceView.as_view(), name="balance"),
    *router.urls,
]
