from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from starverse.core.text import localized


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of silently turning them into text."""

    default_error_messages = {"invalid": _("Must be a string.")}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """An IntegerField that refuses strings, floats and booleans."""

    default_error_messages = {"invalid": _("Must be an integer.")}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


# A request body is validated, never bound to a stored object: its instance type is None.
# (The docstring below is the schema's description of every body that has none of its own.)
class InputSerializer(serializers.Serializer[None]):
    """Base for request bodies: unknown fields are an error, so a typo is never ignored."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: [_("Unknown field.")] for name in unknown})
        return super().to_internal_value(data)


class LocalizedField(serializers.CharField):
    """Operator data kept in two languages (a model's `<field>` and `<field>_zh_hans`), answered
    in the request's language (Accept-Language; English when there is no translation)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        super().__init__(**kwargs)

    def get_attribute(self, instance: Any) -> Any:
        return instance

    def to_representation(self, value: Any) -> str:
        return localized(value, str(self.source))
