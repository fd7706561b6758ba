from rest_framework.routers import SimpleRouter

from events.api import views

router = SimpleRouter(trailing_slash=False)
router.register("webhooks", views.WebhookViewSet, basename="webhook")
router.register("notification-channels", views.ChannelViewSet, basename="notification-channel")

urlpatterns = router.urls
