from django.urls import path

from clusters import plan_views, views

app_name = "clusters"

# The public planner sits beside the cost calculator; the cluster pages are the console's.
urlpatterns = [
    path("clusters/plan/", plan_views.plan_page, name="plan"),
    path("console/clusters/", views.cluster_list, name="list"),
    path("console/clusters/new/", views.cluster_new, name="new"),
    path("console/clusters/<str:pk>/", views.cluster_detail, name="detail"),
    path("console/clusters/<str:pk>/stop/", views.cluster_stop_view, name="stop"),
    path("console/clusters/<str:pk>/start/", views.cluster_start_view, name="start"),
    path("console/clusters/<str:pk>/terminate/", views.cluster_terminate_view, name="terminate"),
    path("console/clusters/<str:pk>/scale/", views.cluster_scale_view, name="scale"),
]
