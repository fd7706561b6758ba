from django.urls import path

from fleet.api import views

urlpatterns = [
    path("nodes", views.NodeListView.as_view(), name="nodes"),
    path("nodes/register", views.NodeRegisterView.as_view(), name="node-register"),
    path("nodes/capacity", views.CapacityView.as_view(), name="nodes-capacity"),
    path("nodes/<str:name>/report", views.NodeReportView.as_view(), name="node-report"),
]
