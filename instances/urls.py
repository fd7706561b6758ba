from django.urls import path

from instances import views

app_name = "instances"

urlpatterns = [
    path("rent/", views.rent, name="rent"),
    path("instances/", views.instance_list, name="list"),
    path("instances/<str:pk>/", views.instance_detail, name="detail"),
    path("instances/<str:pk>/stop/", views.instance_stop_view, name="stop"),
    path("instances/<str:pk>/start/", views.instance_start_view, name="start"),
    path("instances/<str:pk>/terminate/", views.instance_terminate_view, name="terminate"),
]
