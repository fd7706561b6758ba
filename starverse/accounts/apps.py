import django.contrib.admin.apps as admin_apps
from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "starverse.accounts"
    label = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from starverse.accounts import schema  # noqa: F401 - registers the OpenAPI extension


class AdminConfig(admin_apps.AdminConfig):
    """Django's admin, served by Starverse's site (starverse.accounts.sites), whose log-in is the
    console's and which lets operators in only after the second factor."""

    default = False  # the accounts app keeps AccountsConfig
    default_site = "starverse.accounts.sites.AdminSite"
