from datetime import datetime
from typing import Any

from rest_framework import serializers

from starverse.core.api.serializers import InputSerializer, StrictCharField, StrictIntegerField
from storage.models import Disk, SharedStorage

_DATETIME = serializers.DateTimeField()


def _iso(value: datetime | None) -> str | None:
    return _DATETIME.to_representation(value) if value else None


class DiskOutput(serializers.ModelSerializer[Disk]):
    attached_to = serializers.CharField(source="instance_id", allow_null=True)
    mount_path = serializers.CharField()
    delete_after = serializers.DateTimeField(
        allow_null=True, help_text="Set while unpaid storage counts down to deletion."
    )
    region = serializers.CharField(
        source="region_id", help_text="Its region: it attaches only to instances there."
    )

    class Meta:
        model = Disk
        fields = [
            "id",
            "name",
            "size_gb",
            "status",
            "attached_to",
            "mount_path",
            "created_at",
            "delete_after",
            "region",
        ]

    def to_representation(self, obj: Disk) -> dict[str, Any]:
        data = super().to_representation(obj)
        arrears = self.context.get("arrears")
        data["delete_after"] = _iso(arrears.deadline) if arrears is not None else None
        return data


class DiskCreateInput(InputSerializer):
    name = StrictCharField(max_length=63)
    size_gb = StrictIntegerField(min_value=1)
    region = StrictCharField(
        max_length=32,
        required=False,
        allow_blank=True,
        help_text="A region from GET /regions; default: the default region.",
    )


class DiskResizeInput(InputSerializer):
    size_gb = StrictIntegerField(min_value=1)


class NasInput(InputSerializer):
    size_gb = StrictIntegerField(min_value=1)


class NasOutput(serializers.Serializer[SharedStorage]):
    id = serializers.CharField()
    size_gb = serializers.IntegerField(help_text="The quota.")
    status = serializers.CharField()
    mount_path = serializers.CharField(default="/nas")
    used_bytes = serializers.IntegerField(allow_null=True)
    used_at = serializers.DateTimeField(allow_null=True)
