from typing import Any

from django.apps import AppConfig


class InstancesConfig(AppConfig):
    name = "instances"
    verbose_name = "Fleet and instances"

    def ready(self) -> None:
        from billing.signals import wallet_credited

        wallet_credited.connect(_storage_arrears_review, dispatch_uid="storage-arrears-review")


def _storage_arrears_review(sender: Any, tenant_id: str, **kwargs: Any) -> None:
    """A credit may end a storage countdown: bill that tenant's storage now, not at the next
    scheduled run."""
    from instances.storage import open_arrears
    from instances.tasks import bill_storage

    if open_arrears(tenant_id) is not None:
        bill_storage.delay([tenant_id])
