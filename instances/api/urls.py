from django.urls import path
from rest_framework.routers import SimpleRouter

from instances.api import views

router = SimpleRouter(trailing_slash=False)
router.register("instances", views.InstanceViewSet, basename="instance")
router.register("images", views.ImageViewSet, basename="image")

urlpatterns = [
    path("gpu-models", views.GpuModelListView.as_view(), name="gpu-models"),
    path("offerings", views.OfferingListView.as_view(), name="offerings"),
    path("images", views.ImageListView.as_view(), name="images"),
    path("regions", views.RegionListView.as_view(), name="regions"),
    # the cost calculator's Starverse column is a catalog offering: served beside the catalog
    path("calculator/tco", views.TcoView.as_view(), name="calculator-tco"),
    *router.urls,
]
