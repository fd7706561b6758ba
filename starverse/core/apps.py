from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "starverse.core"
    label = "core"
