from typing import Any

from django.apps import AppConfig


class StorageConfig(AppConfig):
    name = "storage"
    verbose_name = "Storage"

    def ready(self) -> None:
        from billing.signals import wallet_credited

        wallet_credited.connect(_storage_arrears_review, dispatch_uid="storage-arrears-review")


def _storage_arrears_review(sender: Any, tenant_id: str, **kwargs: Any) -> None:
    """A credit may end a storage countdown: bill that tenant's storage now, not at the next
    scheduled run."""
    from starverse.core.dispatch import send
    from storage.billing import open_arrears

    if open_arrears(tenant_id) is not None:
        send("storage.tasks.bill_storage", [tenant_id])
