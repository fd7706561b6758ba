from django.urls import path
from rest_framework.routers import SimpleRouter

from starverse.accounts.api import views

router = SimpleRouter(trailing_slash=False)
router.register("tokens", views.TokenViewSet, basename="token")
router.register("ssh-keys", views.SshKeyViewSet, basename="ssh-key")

urlpatterns = [
    path("auth/signup", views.SignupView.as_view(), name="signup"),
    path("auth/token", views.TokenLoginView.as_view(), name="token-login"),
    path("auth/verify-email", views.VerifyEmailView.as_view(), name="verify-email"),
    path(
        "auth/verify-email/resend",
        views.VerifyEmailResendView.as_view(),
        name="verify-email-resend",
    ),
    path("me", views.MeView.as_view(), name="me"),
    path("me/2fa", views.MeTwoFactorView.as_view(), name="me-2fa"),
    path("account/settings", views.AccountSettingsView.as_view(), name="account-settings"),
    *router.urls,
]
