"""The API base classes. Tenant objects are reachable only through TenantScopedViewSet, whose
queryset is always narrowed to the caller, so another tenant's object is a 404, never a 403."""

from typing import Any, ClassVar, TypeVar

from django.db.models import Model, QuerySet
from rest_framework import viewsets
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request

from starverse.core.roles import require_own_or_manager
from starverse.core.tenancy import scope_to_user

M = TypeVar("M", bound=Model)


class TenantScopedViewSet(viewsets.GenericViewSet[M]):
    """Subclasses set `model` and `owner_field` ("user" or "tenant"); they never override
    `get_queryset`, only `filter_queryset_extra` to narrow further."""

    model: type[M]
    owner_field: ClassVar[str] = "tenant"
    lookup_value_regex = "[A-Za-z0-9_]+"

    def get_queryset(self) -> QuerySet[M]:
        # `objects`, reached the way Django's own generic code reaches a model's manager
        queryset = scope_to_user(
            self.model._default_manager.all(), self.request.user, self.owner_field
        )
        return self.filter_queryset_extra(queryset)

    def filter_queryset_extra(self, queryset: QuerySet[M]) -> QuerySet[M]:
        return queryset

    def get_object(self) -> M:
        """The object, 404 for another tenant's; a change (any unsafe method) to an object of
        the tenant that someone ordered is allowed to them, the team's owners and admins only
        (403 `not_yours`), never to the billing role (starverse.core.roles)."""
        obj = super().get_object()
        if self.request.method not in SAFE_METHODS and hasattr(obj, "created_by_id"):
            require_own_or_manager(self.request.user, obj)
        return obj

    def output(self, instance: Any, serializer_class: Any = None, **kwargs: Any) -> Any:
        serializer_class = serializer_class or self.get_serializer_class()
        return serializer_class(instance, context=self.get_serializer_context(), **kwargs).data

    def parse(self, request: Request, serializer_class: Any) -> dict[str, Any]:
        serializer = serializer_class(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)
