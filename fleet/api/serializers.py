from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict

from rest_framework import serializers

from fleet.choices import Interconnect, NodeState
from starverse.core.api.serializers import InputSerializer, StrictCharField, StrictIntegerField


# The staff's fleet list (fleet.api.views.node_rows): a node with its GPUs' live telemetry.
class GpuRow(TypedDict):
    index: int
    uuid: str
    product: str
    memory_mb: int
    lost: bool
    util: int | None
    mem_used_mb: int | None
    temp_c: int | None
    power_w: float | None


class NodeRow(TypedDict):
    id: str
    name: str
    gpu_product: str
    gpu_count: int
    gpu_memory_mb: int
    interconnect: str
    state: str
    state_reason: str
    last_report_at: datetime | None
    driver_version: str
    gpus: list[GpuRow]


class GpuOutput(serializers.Serializer[GpuRow]):
    index = serializers.IntegerField()
    uuid = serializers.CharField()
    product = serializers.CharField()
    memory_mb = serializers.IntegerField()
    lost = serializers.BooleanField()
    util = serializers.IntegerField(allow_null=True)
    mem_used_mb = serializers.IntegerField(allow_null=True)
    temp_c = serializers.IntegerField(allow_null=True)
    power_w = serializers.FloatField(allow_null=True)


class NodeOutput(serializers.Serializer[NodeRow]):
    id = serializers.CharField()
    name = serializers.CharField()
    gpu_product = serializers.CharField()
    gpu_count = serializers.IntegerField()
    gpu_memory_mb = serializers.IntegerField()
    interconnect = serializers.ChoiceField(choices=Interconnect.choices)
    state = serializers.ChoiceField(choices=NodeState.choices)
    state_reason = serializers.CharField()
    last_report_at = serializers.DateTimeField(allow_null=True)
    driver_version = serializers.CharField()
    gpus = GpuOutput(many=True)


class CapacityRowOutput(serializers.Serializer[Mapping[str, object]]):
    gpu_product = serializers.CharField()
    total = serializers.IntegerField()
    allocated = serializers.IntegerField(help_text="Held by instances.")
    unhealthy = serializers.IntegerField(help_text="Lost, or on a node out of service.")
    free = serializers.IntegerField()


class CapacityOutput(serializers.Serializer[Mapping[str, object]]):
    results = CapacityRowOutput(many=True)


class RegisterInput(InputSerializer):
    name = StrictCharField(max_length=253)
    bootstrap_token = StrictCharField(max_length=200)
    gpu_product = StrictCharField(max_length=100)
    gpu_count = StrictIntegerField(min_value=1, max_value=16)
    gpu_memory_mb = StrictIntegerField(min_value=0)
    region = StrictCharField(
        max_length=32,
        required=False,
        help_text="The region (cluster) of the node; default: the default region.",
    )


class RegisteredOutput(serializers.Serializer[Mapping[str, object]]):
    name = serializers.CharField()
    token = serializers.CharField(help_text="The node's own token for its reports; shown once.")


# The node report as the platform reads it (fleet.telemetry.report_parse validates it by hand, on
# the hot path); nodeagent.report builds it. Keys the platform does not read are allowed.
def _text(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(allow_blank=True, **kwargs)


class ReportDriverInput(serializers.Serializer[None]):
    driver_version = _text(max_length=32, required=False, allow_null=True)
    cuda_version = _text(max_length=32, required=False, allow_null=True)
    nvml_version = _text(max_length=32, required=False, allow_null=True)


class ReportInventoryInput(serializers.Serializer[None]):
    index = serializers.IntegerField(min_value=0, max_value=15)
    uuid = _text(max_length=96)
    pci_bus_id = _text(max_length=128, required=False, allow_null=True)
    product = _text(max_length=100)
    memory_total_mb = serializers.IntegerField(min_value=0)
    serial = _text(max_length=64, required=False, allow_null=True)
    vbios = _text(max_length=64, required=False, allow_null=True)
    nvlink_links = serializers.IntegerField(
        min_value=0, max_value=64, required=False, allow_null=True
    )


# A many=True serializer takes max_length (DRF 3.14+); the DRF stubs do not list it, hence the
# call-arg ignores below.


class ReportGpuInput(serializers.Serializer[None]):
    index = serializers.IntegerField(min_value=0, max_value=15)
    uuid = _text(max_length=96)
    metrics = serializers.DictField(
        child=serializers.FloatField(allow_null=True),
        help_text="dcgm-exporter field name → number or null (nodeagent.metrics.METRIC_NAMES).",
    )


class ReportSampleInput(serializers.Serializer[None]):
    at = serializers.DateTimeField()
    gpus = ReportGpuInput(many=True, max_length=16)  # type: ignore[call-arg]


class ReportEventInput(serializers.Serializer[None]):
    at = serializers.DateTimeField()
    type = _text(max_length=32)
    gpu = serializers.IntegerField(min_value=0, max_value=15, required=False, allow_null=True)
    uuid = _text(max_length=96, required=False, allow_null=True)
    xid = serializers.IntegerField(min_value=0, max_value=10_000, required=False, allow_null=True)
    message = _text(max_length=1000, required=False, allow_null=True)


class ReportLostGpuInput(serializers.Serializer[None]):
    index = serializers.IntegerField(min_value=0, max_value=15, required=False, allow_null=True)
    uuid = _text(max_length=96, required=False, allow_null=True)
    pci_bus_id = _text(max_length=128, required=False, allow_null=True)
    error = _text(max_length=64, required=False, allow_null=True)


class NodeReportInput(serializers.Serializer[None]):
    agent_version = _text(max_length=32, required=False)
    node = _text(required=False, allow_null=True, help_text="If given, the URL's node.")
    sent_at = serializers.DateTimeField(required=False)
    driver = ReportDriverInput(required=False)
    inventory = ReportInventoryInput(many=True, required=False, max_length=16)  # type: ignore[call-arg]
    samples = ReportSampleInput(many=True, max_length=240, help_text="Oldest first.")  # type: ignore[call-arg]
    events = ReportEventInput(many=True, required=False, max_length=1000)  # type: ignore[call-arg]
    lost_gpus = ReportLostGpuInput(many=True, required=False, max_length=16)  # type: ignore[call-arg]
    dropped_reports = serializers.IntegerField(min_value=0, required=False)


class ReportRefusedOutput(serializers.Serializer[Mapping[str, object]]):
    gpu = serializers.IntegerField(help_text="The GPU's index.")
    field = serializers.CharField(help_text="The dcgm-exporter metric name.")
    reason = serializers.CharField()


class ReportAcceptedOutput(serializers.Serializer[Mapping[str, object]]):
    accepted_samples = serializers.IntegerField()
    refused = ReportRefusedOutput(
        many=True,
        help_text="Metrics out of their range, stored as null; the rest of the report is kept.",
    )
