from django.apps import AppConfig

from billing.signals import wallet_credited


class StorageConfig(AppConfig):
    name = "storage"
    verbose_name = "Storage"

    def ready(self) -> None:
        # storage.billing, usage and selectors read models: imported once the apps are loaded
        from billing.usage import resource_namer_register
        from storage.billing import arrears_review_on_credit
        from storage.selectors import disks_named

        wallet_credited.connect(arrears_review_on_credit, dispatch_uid="storage-arrears-review")
        resource_namer_register("disks", disks_named)
