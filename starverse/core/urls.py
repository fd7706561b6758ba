from django.urls import path

from starverse.core import views

app_name = "console"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    *[path(f"{page}/", views.coming(page), name=page) for page in views.COMING],
]
