from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from billing.onboarding import user_email_verify
from starverse.accounts.access import access_changed
from starverse.accounts.models import ApiToken, SshKey, Tenant, User
from starverse.accounts.selectors import totp_device_confirmed
from starverse.accounts.services import email_clean, user_email_change
from starverse.accounts.token_cache import token_cache_forget
from starverse.core.errors import ServiceError


class UserChangeAdminForm(UserChangeForm):
    def clean_email(self) -> str:
        try:
            email, _canonical = email_clean(self.cleaned_data["email"])
        except ServiceError as error:
            raise ValidationError(error.message) from None
        return email


class VerifiedFilter(admin.SimpleListFilter):
    title = _("E-mail verified")
    parameter_name = "verified"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Yes")), ("no", _("No"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[User]) -> QuerySet[User]:
        if self.value() in ("yes", "no"):
            return queryset.filter(email_verified_at__isnull=self.value() == "no")
        return queryset


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    form = UserChangeAdminForm
    ordering = ["-date_joined"]
    list_display = [
        "email",
        "canonical_email",
        "email_verified",
        "tenant",
        "is_staff",
        "is_active",
        "date_joined",
        "signup_ip",
    ]
    list_filter = [VerifiedFilter, "is_staff", "is_active"]
    search_fields = ["email", "canonical_email", "id", "tenant__id"]
    readonly_fields = [
        "id",
        "canonical_email",
        "email_verified_at",
        "tenant",
        "date_joined",
        "last_login",
        "signup_ip",
        "two_factor",
    ]
    actions = ["mark_verified"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "id",
                    "email",
                    "canonical_email",
                    "email_verified_at",
                    "tenant",
                    "signup_ip",
                    "two_factor",
                ]
            },
        ),
        (
            _("Access"),
            {"fields": ["is_active", "is_staff", "is_superuser", "groups", "user_permissions"]},
        ),
        (_("Dates"), {"fields": ["date_joined", "last_login"]}),
    ]

    @admin.display(description=_("Two-factor authentication"))
    def two_factor(self, obj: User) -> str:
        device = totp_device_confirmed(obj)
        if device is None:
            return "off"
        return f"on since {device.confirmed_at:%Y-%m-%d %H:%M} (lost phone: manage.py totp_reset)"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Accounts are created by sign-up (or `createsuperuser`), which also makes the wallet.
        return False

    @admin.display(description=_("E-mail verified"), boolean=True)
    def email_verified(self, obj: User) -> bool:
        return obj.email_verified_at is not None

    def save_model(self, request: HttpRequest, obj: User, form: ModelForm, change: bool) -> None:
        if "email" in form.changed_data:
            user_email_change(user=obj, email=form.cleaned_data["email"])  # and its canonical form
        super().save_model(request, obj, form, change)
        token_cache_forget()  # a deactivation holds for this process's API at once
        access_changed(obj.pk)  # and its terminal sessions end

    @admin.action(description=_("Mark verified (grants the trial if eligible)"))
    def mark_verified(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        for user in queryset.order_by("pk"):
            verification = user_email_verify(user=user)
            self.message_user(
                request,
                f"{verification.trial.status.label}: {user.email}"
                if verification.verified_now
                else f"{_('Already verified')}: {user.email}",
                messages.SUCCESS if verification.verified_now else messages.WARNING,
            )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # deactivate instead: the ledger keeps referring to the account


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "created_at"]
    search_fields = ["id", "name"]
    readonly_fields = ["id", "created_at"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["id", "user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    search_fields = ["id", "user__email", "prefix"]
    readonly_fields = ["id", "user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    exclude = ["token_hash"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(SshKey)
class SshKeyAdmin(admin.ModelAdmin):
    list_display = ["id", "user", "name", "key_type", "fingerprint", "created_at"]
    search_fields = ["id", "user__email", "fingerprint"]
    readonly_fields = ["id", "user", "key_type", "fingerprint", "bits", "public_key", "created_at"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
