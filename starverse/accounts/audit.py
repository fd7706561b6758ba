"""The team audit log's one writer: who did what, in which tenant, from where."""

import logging
from typing import Any

from starverse.accounts.models import AuditEvent
from starverse.core.addresses import client_ip

logger = logging.getLogger(__name__)


def audit_record(
    *,
    tenant_id: str,
    actor: Any,
    action: str,
    obj: Any = None,
    object_type: str = "",
    object_id: str = "",
    data: dict[str, Any] | None = None,
    ip: str | None = None,
) -> AuditEvent:
    """Append one event; `obj` (a model row) names the object unless type and id are given."""
    if obj is not None:
        object_type = object_type or obj._meta.model_name
        object_id = object_id or str(obj.pk)
    event = AuditEvent.objects.create(
        tenant_id=tenant_id,
        actor_id=getattr(actor, "pk", None),
        action=action,
        object_type=object_type,
        object_id=object_id,
        data=data or {},
        ip=ip,
    )
    logger.info(
        "audit.event tenant=%s actor=%s action=%s object=%s:%s",
        tenant_id,
        event.actor_id,
        action,
        object_type,
        object_id,
    )
    return event


def audit_request(request: Any, action: str, obj: Any = None, **data: Any) -> AuditEvent:
    """audit_record for an act of the request's user, in the tenant it acts for."""
    user = request.user
    return audit_record(
        tenant_id=user.tenant_id,
        actor=user,
        action=action,
        obj=obj,
        data=data,
        ip=client_ip(request),
    )
