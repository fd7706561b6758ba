from typing import Any

from django.apps import AppConfig

from billing.signals import wallet_credited
from fleet.signals import node_out_of_service
from starverse.accounts.signals import ssh_keys_changed
from starverse.core.dispatch import enqueue_on_commit


def review_queue_on_credit(sender: Any, tenant_id: str, **kwargs: Any) -> None:
    """Receiver of billing's `wallet_credited` (sent after commit): money came in, so the
    tenant's queued orders passed over for want of it are looked at again now, not at the next
    minute's review (instances.lifecycle.queue_review)."""
    enqueue_on_commit("instances.tasks.review_queue", tenant_id)


def access_refresh_on_keys(sender: Any, tenant_id: str, **kwargs: Any) -> None:
    """Receiver of accounts' `ssh_keys_changed`: a person's keys changed, so the access
    Secrets of what they ordered are rendered again once the change commits."""
    enqueue_on_commit("instances.tasks.refresh_access", tenant_id)


def instances_told_on_node(
    sender: Any, node_id: str, state: str, reason: str, **kwargs: Any
) -> None:
    """Receiver of the fleet's `node_out_of_service`: the instances on the node are told
    (failed, recovered elsewhere or warned) once the node's move commits."""
    enqueue_on_commit("instances.tasks.node_changed", node_id, state, reason)


class InstancesConfig(AppConfig):
    name = "instances"
    verbose_name = "Instances"

    def ready(self) -> None:
        wallet_credited.connect(review_queue_on_credit, dispatch_uid="instances-queue-review")
        ssh_keys_changed.connect(access_refresh_on_keys, dispatch_uid="instances-access-refresh")
        node_out_of_service.connect(instances_told_on_node, dispatch_uid="instances-node-changed")
        # usage and selectors read models: imported once the apps are loaded
        from billing.usage import resource_namer_register
        from instances.admission import admission_reader_install
        from instances.metering import meter_hooks_install
        from instances.preemption import preemption_hooks_install
        from instances.selectors import instances_named

        resource_namer_register("instances", instances_named)
        meter_hooks_install()
        preemption_hooks_install()
        admission_reader_install()
