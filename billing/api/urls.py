from django.urls import path
from rest_framework.routers import SimpleRouter

from billing.api import views

router = SimpleRouter(trailing_slash=False)
router.register("billing/ledger", views.LedgerViewSet, basename="ledger")
router.register("billing/topups", views.TopUpViewSet, basename="topup")
router.register("billing/invoices", views.InvoiceViewSet, basename="invoice")
router.register("billing/statements", views.StatementViewSet, basename="statement")

urlpatterns = [
    path("billing/balance", views.BalanceView.as_view(), name="balance"),
    path("billing/invoice-profile", views.InvoiceProfileView.as_view(), name="invoice-profile"),
    path("billing/usage", views.UsageView.as_view(), name="usage"),
    *router.urls,
]
