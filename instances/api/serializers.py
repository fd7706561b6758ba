from typing import Any

from django.conf import settings
from rest_framework import serializers

from instances.choices import BillingMode
from instances.models import GpuModel, Image, Instance, InstanceEvent, Offering
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
    billing = serializers.ChoiceField(
        choices=BillingMode.choices, required=False, default=BillingMode.HOURLY
    )


class InstanceOutput(serializers.ModelSerializer):
    offering = serializers.CharField(source="offering_id")
    image = serializers.CharField(source="image_id")
    gpu_model = serializers.CharField(source="offering.gpu_model_id")
    gpu_count = serializers.IntegerField(source="offering.gpu_count")
    price_per_hour_fen = serializers.IntegerField(source="offering.price_per_hour_fen")
    queue_position = serializers.SerializerMethodField()
    ssh = serializers.SerializerMethodField()
    jupyter_url = serializers.SerializerMethodField()
    disks = serializers.SerializerMethodField()
    node = serializers.SerializerMethodField()

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
        ]

    def get_queue_position(self, obj: Instance) -> int | None:
        from instances.lifecycle import queue_position

        return queue_position(obj)

    def get_ssh(self, obj: Instance) -> dict[str, Any] | None:
        if obj.status != "running" or not obj.ssh_port:
            return None
        host = settings.SSH_GATEWAY_HOST
        return {
            "host": host,
            "port": obj.ssh_port,
            "user": "root",
            "command": f"ssh -p {obj.ssh_port} root@{host}",
        }

    def get_jupyter_url(self, obj: Instance) -> str | None:
        if obj.status != "running" or not obj.jupyter_port:
            return None
        return f"http://{settings.SSH_GATEWAY_HOST}:{obj.jupyter_port}/?token={obj.jupyter_token}"

    def get_disks(self, obj: Instance) -> list[str]:
        return []

    def get_node(self, obj: Instance) -> str | None:
        return obj.node.name if obj.node_id and obj.status in ("provisioning", "running") else None


class InstanceEventOutput(serializers.ModelSerializer):
    class Meta:
        model = InstanceEvent
        fields = ["at", "status", "message"]
