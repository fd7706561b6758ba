from django.apps import AppConfig

from billing.signals import wallet_credited


class StorageConfig(AppConfig):
    name = "storage"
    verbose_name = "Storage"

    def ready(self) -> None:
        # storage.billing reads models, so it can only be imported once the apps are loaded.
        from storage.billing import arrears_review_on_credit

        wallet_credited.connect(arrears_review_on_credit, dispatch_uid="storage-arrears-review")
