"""The one call every product reports an event through: `emit(tenant_id, type, data)` writes
the event in the caller's transaction (so a rolled-back change reports nothing, and a committed
one is never lost: a sweep fans out what the broker dropped) and starts its fan-out after
commit. The products keep it one line at the transition that changed the state."""

from typing import Any

from django.utils import timezone

from events.choices import EventType
from events.models import Event
from starverse.core.dispatch import enqueue_on_commit

FAN_OUT_TASK = "events.tasks.fan_out"


def emit(tenant_id: str, type: EventType | str, data: dict[str, Any]) -> str:
    """Report `type` (one of EventType) about the tenant's resource described by `data`
    (plain JSON: ids, names, statuses; `url` a console path to it). Returns the event's id."""
    kind = EventType(type)
    event = Event.objects.create(
        tenant_id=tenant_id, type=kind.value, data=data, created_at=timezone.now()
    )
    enqueue_on_commit(FAN_OUT_TASK, event.id)
    return event.id


# The console page of what each family of events is about, by the type's first word.
PAGES = {
    "instance": "/console/instances/{id}/",
    "cluster": "/console/clusters/{id}/",
    "job": "/console/jobs/{id}/",
    "endpoint": "/console/endpoints/{id}/",
}


def emit_about(obj: Any, type: EventType | str, **extra: Any) -> str:
    """`emit` about one resource row (an instance, cluster, job or endpoint): its id, name and
    status, the link to its page, who ordered it (`ordered_by`, a user id), and `extra`."""
    kind = EventType(type)
    data = {
        "id": obj.id,
        "name": getattr(obj, "name", "") or obj.id,
        "status": getattr(obj, "status", ""),
        "url": PAGES[kind.value.split(".", 1)[0]].format(id=obj.id),
        # who ordered it: a team's notices reach them besides its owners and admins
        # (events.channels.notify), while they are still a member
        **({"ordered_by": obj.created_by_id} if getattr(obj, "created_by_id", None) else {}),
        **extra,
    }
    return emit(obj.tenant_id, kind, data)
