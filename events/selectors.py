"""Reads of events that more than one caller needs."""

from events.choices import EventType
from events.models import Event


def last_event_type(tenant_id: str, object_id: str, types: tuple[EventType, ...]) -> str | None:
    """The type of the latest of `types` reported about the object (None: none in the events
    kept), e.g. whether a cluster's last word was `cluster.degraded`."""
    return (
        Event.objects.filter(tenant_id=tenant_id, type__in=types, data__id=object_id)
        .order_by("-created_at", "-id")
        .values_list("type", flat=True)
        .first()
    )


def recovered_or(tenant_id: str, object_id: str, ready: EventType) -> EventType:
    """`cluster.recovered` for a cluster whose last word was `cluster.degraded`, else `ready`."""
    last = last_event_type(
        tenant_id,
        object_id,
        (EventType.CLUSTER_DEGRADED, EventType.CLUSTER_READY, EventType.CLUSTER_RECOVERED),
    )
    return EventType.CLUSTER_RECOVERED if last == EventType.CLUSTER_DEGRADED else ready
