from django.urls import path
from rest_framework.routers import SimpleRouter

from instances.api import views

router = SimpleRouter(trailing_slash=False)
router.register("instances", views.InstanceViewSet, basename="instance")
router.register("disks", views.DiskViewSet, basename="disk")

urlpatterns = [
    path("gpu-models", views.GpuModelListView.as_view(), name="gpu-models"),
    path("offerings", views.OfferingListView.as_view(), name="offerings"),
    path("images", views.ImageListView.as_view(), name="images"),
    *router.urls,
    path("nas", views.NasView.as_view(), name="nas"),
    path("nodes", views.NodeListView.as_view(), name="nodes"),
    path("nodes/register", views.NodeRegisterView.as_view(), name="node-register"),
    path("nodes/capacity", views.CapacityView.as_view(), name="nodes-capacity"),
    path("nodes/<str:name>/report", views.NodeReportView.as_view(), name="node-report"),
]
