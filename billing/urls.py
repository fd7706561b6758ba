from django.urls import path

from billing import views

app_name = "billing"

urlpatterns = [
    path("", views.billing, name="billing"),
    path("topup/", views.topup, name="topup"),
    path("topups/<str:pk>/return/", views.topup_return, name="topup_return"),
    path("topups/<str:pk>/resume/", views.topup_resume, name="topup_resume"),
    path("topups/<str:pk>/cancel/", views.topup_cancel_view, name="topup_cancel"),
    path("invoice-profile/", views.invoice_profile, name="invoice_profile"),
    path("invoices/", views.invoice_create, name="invoice_create"),
    path("invoices/<str:pk>/pdf/", views.invoice_pdf, name="invoice_pdf"),
    path("statements/<str:month>/<str:fmt>/", views.statement_file, name="statement_file"),
    path("usage.csv", views.usage_download, name="usage_csv"),
]
