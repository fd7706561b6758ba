"""Instances that run as one gang: placed, queued, started, stopped and paused together, all or
none (a cluster's ranks). An instance is one of a gang only through its GPU holding
(compute.models.Holding.gang: the owner's id, blank for an instance on its own); the instances
app knows nothing more of what the gang is. What it is to its owner (the clusters app: a rank's
number, the objects the ranks share on the cluster, what happens when a rank's node is lost)
comes through the hooks the owner registers here from its AppConfig.ready
(gang_hooks_register), the way products register their meter hooks (compute.metering)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from django.db.models import QuerySet

from fleet.models import Node
from instances.models import Instance, Workload


def gang_of(instance: Instance) -> str:
    """The gang the instance is one of (its owner's id), or "" for an instance on its own.
    instance_locked reads the holding with the row, so this costs no query there."""
    return str(instance.holding.gang)


def gang_members(gang: str) -> QuerySet[Instance]:
    """A gang's instances: its members now (one removed from it, a cluster's rank removed by
    scaling down, has left it)."""
    return Instance.objects.filter(holding__gang=gang)


class GangHooks(Protocol):
    """What the owner of gangs adds to the life of their members."""

    def shared_ensure(
        self,
        instance: Instance,
        node: Node,
        *,
        tenant_fingerprint: str,
        tenant_converge: Callable[[], None],
    ) -> None:
        """Before a member's own objects are made: its tenant's namespace and policies
        (`tenant_converge`; `tenant_fingerprint` digests what it renders) and the objects the
        gang shares on the cluster made or brought up to date, or trusted when another member
        made sure of the same ones in this round (instances.provisioning.converge)."""
        ...

    def shared_forget(self, gang: str) -> None:
        """The gang's shared objects (or its namespace) were found missing: the next member's
        pass makes sure of them again."""
        ...

    def pod(
        self, instance: Instance, node: Node, pod: dict[str, Any], service: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A member's pod and Service as its owner wants them (shared_ensure made what they
        refer to)."""
        ...

    def shared_objects(self, gang: str) -> list[tuple[str, str]]:
        """The (kind, name) of the objects the gang's members share in their namespace: kept
        while a member lives (the reconcile loop), deleted with the last."""
        ...

    def member_lost(self, instance_id: str, *, gang: str, node: Node, reason: str) -> bool:
        """A member's node is down: the owner decides (the instance's row is not locked).
        Returns whether the member was moved."""
        ...

    def member_words(self, instance: Instance) -> dict[str, object]:
        """The words the instances app's messages name a member with: "rank" and "cluster"."""
        ...

    def member_link(self, instance: Instance) -> tuple[str, str]:
        """What the member is, in the reader's language, and the console page of its gang,
        where it stops, starts and terminates (an instance's page links there)."""
        ...


_hooks: list[GangHooks] = []


def gang_hooks_register(hooks: GangHooks) -> None:
    """Called from the gangs' owner's AppConfig.ready (one owner: the clusters app)."""
    _hooks[:] = [hooks]


def gang_hooks() -> GangHooks:
    """The owner's hooks: there is a gang only if its owner is installed."""
    if not _hooks:
        raise LookupError("an instance is one of a gang, but no app owns gangs")
    return _hooks[0]


# An instance that runs a program to its end for an owner (instances.models.Workload.owner: a
# job's id) is shown with its owner, where it is acted on, and its owner decides what happens
# when it loses its node or pod: the owner's app registers both, by the prefix of its ids, as
# one WorkloadOwner.
#
# Why this registry is not the gangs' (gang_hooks_register): the two key different things of
# one instance and can both apply to it. A gang is read from the instance's holding (its
# `gang`, the cluster's id: who places, starts and pays for the instances together); a
# workload's owner from its Workload row (the job's id: who runs a program on it and what its
# end means). A multi-node job's rank is a member of its cluster's gang and its job's workload
# at once: the job decides when it is lost (workload_owner_lost comes first), the cluster what
# its pod is and what it shares.
OwnerLink = Callable[[Instance, str], tuple[str, str]]

# What took a program's instance from it while it held GPUs, as the owner hears it
# (OwnerLost): its node went down, or its pod vanished (evicted, its node shut down, deleted).
NODE_LOST = "node_lost"
POD_LOST = "evicted"


class OwnerLost(Protocol):
    def __call__(self, instance_id: str, *, cause: str, node: Node, reason: str) -> bool:
        """The instance (not locked) lost its node or its pod (`cause`) on `node`: the owner
        places it again, or decides otherwise. Returns whether it moved it."""
        ...


@dataclass(frozen=True)
class WorkloadOwner:
    """What a registered owner of programs adds: `link`, what the instance is to it (in the
    reader's language) and the owner's page; `lost`, what it does when the instance loses its
    node or pod."""

    link: OwnerLink
    lost: OwnerLost


_owners: dict[str, WorkloadOwner] = {}


def workload_owner_register(prefix: str, link: OwnerLink, lost: OwnerLost) -> None:
    """Called from the owner's AppConfig.ready (the jobs app: prefix "job_"): what the
    instance is to it, and what it does when the instance loses its node or pod."""
    _owners[prefix] = WorkloadOwner(link, lost)


def _owner_of(instance: Instance) -> tuple[str, WorkloadOwner] | None:
    """The id of the owner of the instance's program and its registration, or None when no
    registered owner runs it."""
    owner = Workload.objects.filter(pk=instance.pk).values_list("owner", flat=True).first()
    for prefix, registered in _owners.items():
        if owner and owner.startswith(prefix):
            return owner, registered
    return None


def workload_owner_lost(instance: Instance, *, cause: str, node: Node, reason: str) -> bool | None:
    """Tell the owner of the instance's program (call outside the instance's lock: the owner
    locks its own row first) that it lost its node or pod; whether the owner moved it, or None
    when no registered owner runs it (the instances app recovers it as any instance)."""
    if (found := _owner_of(instance)) is None:
        return None
    return found[1].lost(instance.pk, cause=cause, node=node, reason=reason)


def workload_owned(instance: Instance) -> bool:
    """Whether a registered owner runs the instance's program (it decides how it recovers)."""
    return _owner_of(instance) is not None


def workload_owner_link(instance: Instance) -> tuple[str, str] | None:
    """(what the instance is, in the reader's language; its owner's page), or None for an
    instance no registered owner runs."""
    if (found := _owner_of(instance)) is None:
        return None
    owner, registered = found
    return registered.link(instance, owner)
