from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "starverse.accounts"
    label = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from starverse.accounts import schema  # noqa: F401 - registers the OpenAPI extension
