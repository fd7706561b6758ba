from django.contrib.auth import views as auth_views
from django.urls import path

from starverse.accounts import views

app_name = "accounts"

urlpatterns = [
    path("signup/", views.signup, name="signup"),
    path("verify-email/resend/", views.verify_email_resend, name="verify_email_resend"),
    path("verify-email/<str:token>/", views.verify_email, name="verify_email"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("login/verify/", views.login_verify, name="login_verify"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("password-reset/", views.PasswordResetView.as_view(), name="password_reset"),
    path(
        "password-reset/sent/",
        auth_views.PasswordResetDoneView.as_view(template_name="accounts/password_reset_done.html"),
        name="password_reset_done",
    ),
    path(
        "password-reset/<uidb64>/<token>/",
        views.PasswordResetConfirmView.as_view(),
        name="password_reset_confirm",
    ),
    path(
        "password-reset/complete/",
        auth_views.PasswordResetCompleteView.as_view(
            template_name="accounts/password_reset_complete.html"
        ),
        name="password_reset_complete",
    ),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<str:pk>/revoke/", views.token_delete, name="token_delete"),
    path("tokens/<str:pk>/caps/", views.token_caps, name="token_caps"),
    path("security/", views.security, name="security"),
    path("security/enrol/", views.security_enrol, name="security_enrol"),
    path("security/confirm/", views.security_confirm, name="security_confirm"),
    path("security/recovery-codes/", views.security_recovery_codes, name="security_recovery_codes"),
    path("security/disable/", views.security_disable, name="security_disable"),
    path("settings/", views.account_settings, name="settings"),
    path("ssh-keys/", views.ssh_keys, name="ssh_keys"),
    path("ssh-keys/<str:pk>/delete/", views.ssh_key_remove, name="ssh_key_delete"),
]
