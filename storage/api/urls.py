from django.urls import path
from rest_framework.routers import SimpleRouter

from storage.api import views

router = SimpleRouter(trailing_slash=False)
router.register("disks", views.DiskViewSet, basename="disk")

urlpatterns = [
    *router.urls,
    path("nas", views.NasView.as_view(), name="nas"),
]
