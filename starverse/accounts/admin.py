from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.http import HttpRequest

from starverse.accounts.models import ApiToken, SshKey, Tenant, User
from starverse.accounts.selectors import totp_device_confirmed


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    ordering = ["-date_joined"]
    list_display = ["email", "tenant", "is_staff", "is_active", "date_joined", "signup_ip"]
    list_filter = ["is_staff", "is_active"]
    search_fields = ["email", "id", "tenant__id"]
    readonly_fields = ["id", "tenant", "date_joined", "last_login", "signup_ip", "two_factor"]
    fieldsets = [
        (None, {"fields": ["id", "email", "tenant", "signup_ip", "two_factor"]}),
        (
            "Access",
            {"fields": ["is_active", "is_staff", "is_superuser", "groups", "user_permissions"]},
        ),
        ("Dates", {"fields": ["date_joined", "last_login"]}),
    ]

    @admin.display(description="Two-factor authentication")
    def two_factor(self, obj: User) -> str:
        device = totp_device_confirmed(obj)
        if device is None:
            return "off"
        return f"on since {device.confirmed_at:%Y-%m-%d %H:%M} (lost phone: manage.py totp_reset)"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Accounts are created by sign-up (or `createsuperuser`), which also makes the wallet.
        return False

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
