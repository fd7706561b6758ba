from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def default_region_ensure(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """The region `default` (KUBECONFIG's cluster) always exists: migration fleet 0007 makes it,
    and this puts it back after a flush (which empties every table and then sends
    post_migrate, as it does for content types), so nodes and disks always have their default."""
    from fleet.models import DEFAULT_REGION, DEFAULT_REGION_NAMES, Region

    Region.objects.using(using).get_or_create(name=DEFAULT_REGION, defaults=DEFAULT_REGION_NAMES)


class FleetConfig(AppConfig):
    name = "fleet"
    verbose_name = "Fleet"

    def ready(self) -> None:
        post_migrate.connect(default_region_ensure, sender=self, dispatch_uid="fleet-region")
