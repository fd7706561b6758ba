from django.urls import path

from billing import views

app_name = "billing"

urlpatterns = [
    path("", views.billing, name="billing"),
    path("topup/", views.topup, name="topup"),
    path("topups/<str:pk>/return/", views.topup_return, name="topup_return"),
]
