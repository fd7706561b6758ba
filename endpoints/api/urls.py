from rest_framework.routers import SimpleRouter

from endpoints.api import views

router = SimpleRouter(trailing_slash=False)
router.register("endpoints", views.EndpointViewSet, basename="endpoint")

urlpatterns = router.urls
