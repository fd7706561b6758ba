from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "starverse.accounts"
    label = "accounts"
    verbose_name = "Accounts"
