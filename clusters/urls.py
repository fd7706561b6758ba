from django.urls import path

from clusters import plan_views

app_name = "clusters"

urlpatterns = [
    path("plan/", plan_views.plan_page, name="plan"),
]
