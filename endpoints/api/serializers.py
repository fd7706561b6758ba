from collections.abc import Mapping

from rest_framework import serializers

from endpoints.choices import EndpointStatus, Engine
from endpoints.models import EndpointKey
from starverse.core.api.dryrun import dry_run_field
from starverse.core.api.serializers import InputSerializer, StrictCharField, StrictIntegerField


class SourceInput(InputSerializer):
    disk = StrictCharField(max_length=32, required=False, help_text="A cloud disk's id.")
    path = StrictCharField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="With `disk`: the model's folder on the disk, relative to its root.",
    )
    nas_path = StrictCharField(
        max_length=500, required=False, help_text="A folder of the shared NAS, relative to /nas."
    )
    dataset = StrictCharField(
        max_length=200,
        required=False,
        help_text="A public-pool model: its id, or its path under /public/models/.",
    )


class EndpointCreateInput(InputSerializer):
    dry_run = dry_run_field()
    name = StrictCharField(max_length=63, help_text="Also the served model's name.")
    source = SourceInput(  # type: ignore[assignment]  # a field named like Field.source
        help_text="Exactly one of disk (with path), nas_path or dataset."
    )
    engine = serializers.ChoiceField(choices=Engine.choices)
    offering = StrictCharField(max_length=32, help_text="A cloud offering of 1, 2, 4 or 8 GPUs.")
    min_replicas = StrictIntegerField(min_value=0, help_text="0: scale to zero when idle.")
    max_replicas = StrictIntegerField(min_value=1)
    engine_options = serializers.DictField(
        required=False, help_text="Engine options (user's guide, Inference endpoints): per engine."
    )


class EndpointChangeInput(InputSerializer):
    dry_run = dry_run_field()
    min_replicas = StrictIntegerField(min_value=0, required=False)
    max_replicas = StrictIntegerField(min_value=1, required=False)
    engine_options = serializers.DictField(required=False)
    update = serializers.BooleanField(  # type: ignore[assignment]  # the API's field name
        required=False,
        default=False,
        help_text="Take a new snapshot of the source and roll the replicas to it one by one.",
    )


class ReplicasOutput(serializers.Serializer[Mapping[str, object]]):
    ready = serializers.IntegerField()
    desired = serializers.IntegerField()
    min = serializers.IntegerField()
    max = serializers.IntegerField()
    restarts = serializers.IntegerField(help_text="Engine container restarts, all replicas.")


class EndpointOutput(serializers.Serializer[Mapping[str, object]]):
    id = serializers.CharField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=EndpointStatus.choices)
    url = serializers.CharField(help_text="OpenAI-compatible base URL (…/v1).")
    model = serializers.CharField(help_text="The model name clients pass.")
    source = serializers.DictField()  # type: ignore[assignment]  # the API's field name
    engine = serializers.ChoiceField(choices=Engine.choices)
    engine_options = serializers.DictField()
    engine_command = serializers.CharField(help_text="The engine's command line.")
    offering = serializers.CharField()
    gpu_count = serializers.IntegerField()
    price_per_replica_hour_fen = serializers.IntegerField()
    min_replicas = serializers.IntegerField()
    max_replicas = serializers.IntegerField()
    replicas = ReplicasOutput()
    cold_start_s = serializers.FloatField(
        allow_null=True, help_text="Seconds a replica took from start to ready, last seen."
    )
    generation = serializers.IntegerField()
    cost_fen = serializers.IntegerField()
    error_message = serializers.CharField()
    created_at = serializers.DateTimeField()


class KeyCreateInput(InputSerializer):
    name = StrictCharField(max_length=100, required=False, allow_blank=True)


class KeyOutput(serializers.Serializer[EndpointKey]):
    id = serializers.CharField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The key's first characters.")
    created_at = serializers.DateTimeField()


class KeyCreatedOutput(KeyOutput):
    key = serializers.CharField(help_text="Shown this once: only its hash is kept.")


class MetricsPointOutput(serializers.Serializer[Mapping[str, object]]):
    ts = serializers.DateTimeField()
    requests_per_s = serializers.FloatField()
    latency_p50_ms = serializers.FloatField(allow_null=True)
    latency_p99_ms = serializers.FloatField(allow_null=True)
    tokens_per_s = serializers.FloatField()
    replicas_ready = serializers.IntegerField()


class MetricsOutput(serializers.Serializer[Mapping[str, object]]):
    results = MetricsPointOutput(many=True)
