from django.urls import path

from clusters import views

app_name = "clusters"

urlpatterns = [
    path("clusters/", views.cluster_list, name="list"),
    path("clusters/new/", views.cluster_new, name="new"),
    path("clusters/<str:pk>/", views.cluster_detail, name="detail"),
    path("clusters/<str:pk>/stop/", views.cluster_stop_view, name="stop"),
    path("clusters/<str:pk>/start/", views.cluster_start_view, name="start"),
    path("clusters/<str:pk>/terminate/", views.cluster_terminate_view, name="terminate"),
]
