from django.urls import path
from rest_framework.routers import SimpleRouter

from clusters.api import views

# `clusters/plan` (the parallelism planner) is routed before these, so that it is not read as
# a cluster id.
router = SimpleRouter(trailing_slash=False)
router.register("clusters", views.ClusterViewSet, basename="cluster")

urlpatterns = [
    path("clusters/plan", views.PlanView.as_view(), name="clusters-plan"),
    *router.urls,
]
