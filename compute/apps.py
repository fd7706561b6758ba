from django.apps import AppConfig


class ComputeConfig(AppConfig):
    name = "compute"
    verbose_name = "Compute"
