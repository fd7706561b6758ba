"""The API base classes. Tenant objects are reachable only through TenantScopedViewSet, whose
queryset is always narrowed to the caller, so another tenant's object is a 404, never a 403."""

from typing import Any, ClassVar, TypeVar

from django.db.models import Model, QuerySet
from rest_framework import viewsets
from rest_framework.request import Request

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

    def output(self, instance: Any, serializer_class: Any = None, **kwargs: Any) -> Any:
        serializer_class = serializer_class or self.get_serializer_class()
        return serializer_class(instance, context=self.get_serializer_context(), **kwargs).data

    def parse(self, request: Request, serializer_class: Any) -> dict[str, Any]:
        serializer = serializer_class(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)
