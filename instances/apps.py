from typing import Any

from django.apps import AppConfig

from billing.signals import wallet_credited
from starverse.core.dispatch import enqueue_on_commit


def review_queue_on_credit(sender: Any, tenant_id: str, **kwargs: Any) -> None:
    """Receiver of billing's `wallet_credited` (sent after commit): money came in, so the
    tenant's queued orders passed over for want of it are looked at again now, not at the next
    minute's review (instances.lifecycle.queue_review)."""
    enqueue_on_commit("instances.tasks.review_queue", tenant_id)


class InstancesConfig(AppConfig):
    name = "instances"
    verbose_name = "Instances"

    def ready(self) -> None:
        wallet_credited.connect(review_queue_on_credit, dispatch_uid="instances-queue-review")
