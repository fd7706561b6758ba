from typing import Any

from django.conf import settings
from rest_framework import serializers

from fleet.models import GpuModel
from instances.choices import BillingMode
from instances.models import Image, Instance, InstanceEvent, Offering
from starverse.core.api.serializers import InputSerializer, StrictCharField


class GpuModelOutput(serializers.ModelSerializer):
    class Meta:
        model = GpuModel
        fields = ["id", "name", "memory_gb", "interconnect"]


class OfferingOutput(serializers.ModelSerializer):
    gpu_model = serializers.CharField(source="gpu_model_id")
    available = serializers.SerializerMethodField()

    class Meta:
        model = Offering
        fields = [
            "id",
            "name",
            "kind",
            "gpu_model",
            "gpu_count",
            "cpu_cores",
            "memory_gb",
            "local_disk_gb",
            "price_per_hour_fen",
            "price_per_month_fen",
            "available",
        ]

    def get_available(self, obj: Offering) -> int:
        return self.context["availability"].get(obj.id, 0)


class ImageOutput(serializers.ModelSerializer):
    class Meta:
        model = Image
        fields = ["id", "name", "description"]


class InstanceCreateInput(InputSerializer):
    offering = StrictCharField(max_length=32)
    image = StrictCharField(max_length=64)
    name = StrictCharField(max_length=100, required=False, allow_blank=True)
    ssh_keys = serializers.ListField(
        child=StrictCharField(max_length=32), required=False, max_length=50
    )
    disks = serializers.ListField(
        child=StrictCharField(max_length=32), required=False, max_length=8
    )
    auto_renew = serializers.BooleanField(required=False, default=True)
    auto_recover = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="On node loss, place again elsewhere with the same disks. "
        "Default: on for cloud instances, off for whole nodes.",
    )
    billing = serializers.ChoiceField(
        choices=BillingMode.choices, required=False, default=BillingMode.HOURLY
    )


class SshOutput(serializers.Serializer):
    host = serializers.CharField()
    port = serializers.IntegerField()
    user = serializers.CharField()
    command = serializers.CharField()


class InstanceOutput(serializers.ModelSerializer):
    offering = serializers.CharField(source="offering_id")
    image = serializers.CharField(source="image_id")
    gpu_model = serializers.CharField(source="offering.gpu_model_id")
    gpu_count = serializers.IntegerField(source="offering.gpu_count")
    price_per_hour_fen = serializers.IntegerField(source="offering.price_per_hour_fen")
    queue_position = serializers.IntegerField(allow_null=True)
    ssh = SshOutput(allow_null=True, help_text="While running.")
    jupyter_url = serializers.CharField(allow_null=True)
    disks = serializers.ListField(child=serializers.CharField())
    node = serializers.CharField(allow_null=True)

    class Meta:
        model = Instance
        fields = [
            "id",
            "name",
            "status",
            "offering",
            "image",
            "gpu_model",
            "gpu_count",
            "billing",
            "price_per_hour_fen",
            "created_at",
            "started_at",
            "queue_position",
            "ssh",
            "jupyter_url",
            "cost_fen",
            "disks",
            "node",
            "error_message",
            "paid_until",
            "auto_renew",
            "auto_recover",
        ]

    def to_representation(self, obj: Instance) -> dict[str, Any]:
        """Built directly rather than field by field: this is every instance list's hot path.
        The declared fields above document the same keys for the OpenAPI schema (a test
        keeps the two equal)."""
        from instances.lifecycle import queue_position

        running = obj.status == "running"
        host = settings.SSH_GATEWAY_HOST
        return {
            "id": obj.id,
            "name": obj.name,
            "status": obj.status,
            "offering": obj.offering_id,
            "image": obj.image_id,
            "gpu_model": obj.offering.gpu_model_id,
            "gpu_count": obj.offering.gpu_count,
            "billing": obj.billing,
            "price_per_hour_fen": obj.offering.price_per_hour_fen,
            "created_at": _iso(obj.created_at),
            "started_at": _iso(obj.started_at),
            "queue_position": queue_position(obj) if obj.status == "queued" else None,
            "ssh": {
                "host": host,
                "port": obj.ssh_port,
                "user": "root",
                "command": f"ssh -p {obj.ssh_port} root@{host}",
            }
            if running and obj.ssh_port
            else None,
            "jupyter_url": f"http://{host}:{obj.jupyter_port}/?token={obj.jupyter_token}"
            if running and obj.jupyter_port
            else None,
            "cost_fen": obj.cost_fen,
            "disks": _disk_ids(obj),
            "node": obj.node.name
            if obj.node_id and obj.status in ("provisioning", "running")
            else None,
            "error_message": obj.error_message,
            "paid_until": _iso(obj.paid_until),
            "auto_renew": obj.auto_renew,
            "auto_recover": obj.auto_recover,
        }


def _disk_ids(obj: Instance) -> list[str]:
    # a list view prefetches them (`attached_disks`); a single instance reads them
    prefetched = getattr(obj, "attached_disks", None)
    if prefetched is not None:
        return [disk.id for disk in prefetched]
    return list(obj.disks.order_by("name").values_list("id", flat=True))


_DATETIME = serializers.DateTimeField()  # one field, not one per value: lists call this a lot


def _iso(value: Any) -> str | None:
    return _DATETIME.to_representation(value) if value else None


class InstanceEventOutput(serializers.ModelSerializer):
    message = serializers.CharField(source="text", help_text="In the request's language.")

    class Meta:
        model = InstanceEvent
        fields = ["at", "status", "message"]


class DiskAttachInput(InputSerializer):
    disk = StrictCharField(max_length=32)
    restart = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Confirm that a running instance restarts to change its disks.",
    )


class GpuSampleOutput(serializers.Serializer):
    at = serializers.DateTimeField()
    util = serializers.IntegerField(allow_null=True)
    mem_used_mb = serializers.IntegerField(allow_null=True)
    temp_c = serializers.IntegerField(allow_null=True)
    power_w = serializers.FloatField(allow_null=True)


class GpuSeriesOutput(serializers.Serializer):
    gpu = serializers.IntegerField(help_text="The GPU's index on its node.")
    uuid = serializers.CharField()
    samples = GpuSampleOutput(many=True, help_text="Oldest first.")


class InstanceMetricsOutput(serializers.Serializer):
    results = GpuSeriesOutput(many=True, help_text="One series per GPU of the instance.")
