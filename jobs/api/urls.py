from rest_framework.routers import SimpleRouter

from jobs.api import views

router = SimpleRouter(trailing_slash=False)
router.register("jobs", views.JobViewSet, basename="job")

urlpatterns = router.urls
