"""Access helpers: the only way tenant objects are read on behalf of a user."""

from typing import TYPE_CHECKING, TypeVar

from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Model, QuerySet
from django.http import Http404

if TYPE_CHECKING:  # the core names the user model only for the type checker (import contracts)
    from starverse.accounts.models import User

M = TypeVar("M", bound=Model)


def scope_to_user(
    queryset: QuerySet[M], user: "User | AnonymousUser", owner_field: str
) -> QuerySet[M]:
    if isinstance(user, AnonymousUser) or not user.is_authenticated:
        return queryset.none()
    # owner_field is a lookup path ending at the owning user or tenant, e.g. "wallet__tenant".
    last = owner_field.rsplit("__", 1)[-1]
    if last == "user":
        return queryset.filter(**{f"{owner_field}_id": user.pk})
    if last == "tenant":
        return queryset.filter(**{f"{owner_field}_id": user.tenant_id})
    raise ValueError(f"owner field must end in user or tenant, not {owner_field!r}")


def get_for_user(
    queryset: QuerySet[M], user: "User | AnonymousUser", owner_field: str, pk: str
) -> M:
    """The object with this id if it belongs to the user, else 404 (never 403)."""
    try:
        return scope_to_user(queryset, user, owner_field).get(pk=pk)
    except (ObjectDoesNotExist, ValueError):
        raise Http404 from None
