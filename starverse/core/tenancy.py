"""Access helpers: the only way tenant objects are read on behalf of a user."""

from typing import Any, TypeVar

from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Model, QuerySet
from django.http import Http404

M = TypeVar("M", bound=Model)


def scope_to_user(queryset: QuerySet[M], user: Any, owner_field: str) -> QuerySet[M]:
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    # owner_field is a lookup path ending at the owning user or tenant, e.g. "wallet__tenant".
    last = owner_field.rsplit("__", 1)[-1]
    if last == "user":
        return queryset.filter(**{f"{owner_field}_id": user.pk})
    if last == "tenant":
        return queryset.filter(**{f"{owner_field}_id": user.tenant_id})
    raise ValueError(f"owner field must end in user or tenant, not {owner_field!r}")


def get_for_user(queryset: QuerySet[M], user: Any, owner_field: str, pk: str) -> M:
    """The object with this id if it belongs to the user, else 404 (never 403)."""
    try:
        return scope_to_user(queryset, user, owner_field).get(pk=pk)
    except (ObjectDoesNotExist, ValueError):
        raise Http404 from None
