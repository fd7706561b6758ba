from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from rest_framework import serializers

from clusters.choices import ClusterStatus, Template
from clusters.models import Preflight, PreflightStatus
from clusters.planner import PRESETS, PlanInputError, plan_inputs
from clusters.pods import launch_of, layout_of, rank_host
from clusters.ranks import number
from clusters.selectors import ClusterView
from compute.choices import BillingMode
from instances.choices import InstanceStatus
from instances.models import InstanceEvent
from starverse.core.api.dryrun import dry_run_field
from starverse.core.api.serializers import InputSerializer, StrictCharField, StrictIntegerField


class ParallelismInput(InputSerializer):
    tensor = serializers.IntegerField(
        min_value=1, help_text="Tensor-parallel degree: divides the GPUs per node."
    )
    pipeline = serializers.IntegerField(
        min_value=1, required=False, default=1, help_text="Pipeline-parallel degree."
    )


class ClusterCreateInput(InputSerializer):
    dry_run = dry_run_field()
    offering = StrictCharField(max_length=32, help_text="A whole-node (bare metal) offering.")
    node_count = serializers.IntegerField(
        min_value=2, help_text="Whole nodes, one rank each: 2 to CLUSTER_MAX_NODES (128)."
    )
    image = StrictCharField(max_length=64)
    template = serializers.ChoiceField(
        choices=Template.choices, required=False, default=Template.TORCHRUN
    )
    name = StrictCharField(max_length=90, required=False, allow_blank=True)
    ssh_keys = serializers.ListField(
        child=StrictCharField(max_length=32), required=False, max_length=50
    )
    region = StrictCharField(
        max_length=32,
        required=False,
        allow_blank=True,
        help_text="The region every rank runs in (GET /regions); empty or absent: any region "
        "with room (or the disks' region), never several.",
    )
    billing = serializers.ChoiceField(
        choices=BillingMode.choices, required=False, default=BillingMode.HOURLY
    )
    spot_max_wait_minutes = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="A spot cluster: fail, every rank and at no cost, if not placed within this "
        "many minutes (1 to 10080); omitted: wait as long as it takes.",
    )
    disks = serializers.ListField(
        child=serializers.ListField(child=StrictCharField(max_length=32), max_length=16),
        required=False,
        max_length=128,
        help_text="Cloud disks per rank: entry n lists the disk ids attached to rank n (fewer "
        "entries than nodes leave the rest without). Each disk free, yours, named once.",
    )
    parallelism = ParallelismInput(
        required=False,
        help_text="Megatron-LM degrees for the launch script; tensor × pipeline divides the "
        "world size. Default: tensor = GPUs per node, pipeline 1.",
    )


class ClusterScaleInput(InputSerializer):
    node_count = StrictIntegerField(help_text="The new node count: 2 to CLUSTER_MAX_NODES.")
    keep_disks = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Scaling down: keep the removed ranks' own disks as cloud disks.",
    )


class RankOutput(serializers.Serializer[Mapping[str, object]]):
    rank = serializers.IntegerField()
    # A field named like BaseSerializer.instance (the object serialized).
    instance = serializers.CharField(help_text="The rank's instance id.")  # type: ignore[assignment]
    node = serializers.CharField(allow_null=True)
    switch = serializers.CharField(allow_null=True, help_text="The node's leaf switch.")
    status = serializers.ChoiceField(choices=InstanceStatus.choices)
    host = serializers.CharField(
        allow_null=True, help_text="The rank's stable DNS name inside the cluster."
    )


class PreflightPairOutput(serializers.Serializer[Mapping[str, object]]):
    round = serializers.IntegerField()
    ranks = serializers.ListField(child=serializers.IntegerField())
    hosts = serializers.ListField(child=serializers.CharField())
    busbw_gbps = serializers.FloatField()


class PreflightBadNodeOutput(serializers.Serializer[Mapping[str, object]]):
    rank = serializers.IntegerField()
    node = serializers.CharField()


class PreflightOutput(serializers.Serializer[Preflight]):
    """The cluster's latest pre-flight round. Bandwidths are bus bandwidth in GB/s (10^9
    bytes a second), as nccl-tests prints busbw."""

    status = serializers.ChoiceField(choices=PreflightStatus.choices)
    round = serializers.IntegerField(help_text="1 for the first round; more after a failure.")
    busbw_gbps = serializers.FloatField(
        allow_null=True, help_text="All-reduce across every rank, GB/s (nccl-tests busbw)."
    )
    floor_gbps = serializers.FloatField(
        allow_null=True, help_text="The offering's floor, GB/s; null: any result passes."
    )
    pairs = PreflightPairOutput(many=True, help_text="Node pairs, each node in two at least.")
    bad_nodes = PreflightBadNodeOutput(
        many=True,
        help_text="The ranks the round blamed: each moved to another node. The check runs in "
        "the tenant's container, so a node is cordoned only when the platform's own signal "
        "agrees, else put up for an operator's review.",
    )
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class ParallelismOutput(serializers.Serializer[Mapping[str, object]]):
    tensor = serializers.IntegerField()
    pipeline = serializers.IntegerField()
    data = serializers.IntegerField()  # type: ignore[assignment]  # popped into the fields


class ClusterOutput(serializers.Serializer[ClusterView]):
    """A cluster: its derived status, its ranks and where they run, and what it cost."""

    id = serializers.CharField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=ClusterStatus.choices)
    offering = serializers.CharField()
    image = serializers.CharField()
    gpu_model = serializers.CharField()
    region = serializers.CharField(
        allow_null=True, help_text="Where its ranks run (all in one); null: any, not placed yet."
    )
    node_count = serializers.IntegerField()
    template = serializers.ChoiceField(choices=Template.choices)
    billing = serializers.ChoiceField(choices=BillingMode.choices)
    price_per_hour_fen = serializers.IntegerField(help_text="All nodes together.")
    switches_spanned = serializers.IntegerField(
        allow_null=True, help_text="Leaf switches under its nodes; null until placed."
    )
    queue_position = serializers.IntegerField(allow_null=True)
    ranks = RankOutput(many=True)
    preflight = PreflightOutput(allow_null=True)
    cost_fen = serializers.IntegerField()
    launch = serializers.DictField(
        child=serializers.CharField(),
        help_text="The template's launch command by name, to run on any rank; empty for none.",
    )
    parallelism = ParallelismOutput(help_text="The Megatron-LM degrees of the launch script.")
    created_at = serializers.DateTimeField()

    def to_representation(self, view: ClusterView) -> dict[str, Any]:
        cluster = view.cluster
        tensor, pipeline, data = layout_of(cluster).degrees()
        return {
            "id": cluster.id,
            "name": cluster.name,
            "status": view.status,
            "offering": cluster.offering_id,
            "image": cluster.image_id,
            "gpu_model": cluster.offering.gpu_model_id,
            "region": next((rank.region_id for rank in view.ranks if rank.region_id), None),
            "node_count": cluster.node_count,
            "template": cluster.template,
            "billing": cluster.billing,
            "price_per_hour_fen": cluster.offering.price_per_hour_fen * cluster.node_count,
            "switches_spanned": view.switches_spanned,
            "queue_position": view.queue_position,
            "ranks": [
                {
                    "rank": number(rank),
                    "instance": rank.id,
                    "node": node.name if node else None,
                    "switch": (node.switch or None) if node else None,
                    "status": rank.status,
                    "host": rank_host(cluster.id, number(rank)),
                }
                for rank, node in ((rank, view.node_of(rank)) for rank in view.ranks)
            ],
            "preflight": PreflightOutput(view.preflight).data if view.preflight else None,
            "cost_fen": view.cost_fen,
            "launch": launch_of(cluster),
            "parallelism": {"tensor": tensor, "pipeline": pipeline, "data": data},
            "created_at": serializers.DateTimeField().to_representation(cluster.created_at),
        }


class ClusterScaleOutput(ClusterOutput):
    """The cluster after scaling, and what changed (as its timeline says it)."""

    message = serializers.CharField(
        allow_null=True, help_text="Null when the cluster already had that many nodes."
    )

    def to_representation(self, view: ClusterView) -> dict[str, Any]:
        said = self.context.get("message")
        return {**super().to_representation(view), "message": str(said) if said else None}


class ClusterEventOutput(serializers.Serializer[InstanceEvent]):
    at = serializers.DateTimeField()
    rank = serializers.IntegerField(
        source="instance.cluster_rank.index", allow_null=True, help_text="Null: a rank scaled away."
    )
    status = serializers.CharField()
    message = serializers.CharField(source="text", help_text="In the request's language.")
    text = serializers.CharField(
        source="told",
        help_text="As the console tells it, in the request's language: a Kubernetes event of a "
        "known reason as a sentence (its image, size and time read out of kubelet's message); "
        "any other step as `message`.",
    )


class RankMetricsOutput(serializers.Serializer[Mapping[str, object]]):
    rank = serializers.IntegerField()
    gpus = serializers.ListField(child=serializers.DictField(), help_text="As instance metrics.")


class ClusterMetricsOutput(serializers.Serializer[Mapping[str, object]]):
    results = RankMetricsOutput(many=True)


class PlanInput(InputSerializer):
    """A model and the GPUs to train it on. A `preset` fills the model's fields that are not
    given; `tensor_parallel`, `pipeline_parallel` and `zero_stage` pin a degree."""

    preset = serializers.ChoiceField(
        choices=sorted(PRESETS), required=False, help_text="A Llama-like shape to start from."
    )
    params_b = serializers.DecimalField(
        max_digits=9,
        decimal_places=3,
        min_value=Decimal("0.001"),
        max_value=Decimal("100000"),
        required=False,
        help_text="Parameters, in billions.",
    )
    num_layers = StrictIntegerField(min_value=1, max_value=1000, required=False)
    hidden_size = StrictIntegerField(min_value=64, max_value=1_000_000, required=False)
    num_attention_heads = StrictIntegerField(
        min_value=1, max_value=10_000, required=False, help_text="Default: hidden size / 128."
    )
    seq_length = StrictIntegerField(min_value=1, max_value=10_000_000, required=False)
    micro_batch_size = StrictIntegerField(min_value=1, max_value=10_000, required=False)
    gpu_model = StrictCharField(max_length=32, help_text="A GPU model's id (GET /gpu-models).")
    node_count = StrictIntegerField(min_value=1, help_text="Whole nodes: 1 to CLUSTER_MAX_NODES.")
    tensor_parallel = StrictIntegerField(min_value=1, max_value=64, required=False)
    pipeline_parallel = StrictIntegerField(min_value=1, max_value=1000, required=False)
    zero_stage = serializers.ChoiceField(choices=[0, 1, 2, 3], required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:
            shape, hardware, pins = plan_inputs(attrs)
        except PlanInputError as error:
            raise serializers.ValidationError(
                {name: [text] for name, text in error.errors.items()}
            ) from None
        return {"shape": shape, "hardware": hardware, "pins": pins}


class PlanLineOutput(serializers.Serializer[Mapping[str, object]]):
    item = serializers.CharField(help_text="parameters, gradients, optimizer or activations.")
    # A field named `label`: see billing.api.serializers.TcoLineOutput.
    label = serializers.CharField()  # type: ignore[assignment]
    formula = serializers.CharField()
    bytes = serializers.IntegerField()
    gb = serializers.FloatField(help_text="GiB (2^30 bytes), two decimals.")


class PlanMemoryOutput(serializers.Serializer[Mapping[str, object]]):
    lines = PlanLineOutput(many=True)
    total_bytes = serializers.IntegerField()
    total_gb = serializers.FloatField()
    usable_gb = serializers.FloatField(help_text="The GPU's memory less the safety margin.")
    safety_margin = serializers.FloatField()


class PlanOutput(serializers.Serializer[Mapping[str, object]]):
    """The degrees chosen, the per-GPU memory estimate and the filled Megatron-LM command."""

    gpu_model = serializers.CharField()
    gpu_memory_gb = serializers.IntegerField()
    gpus_per_node = serializers.IntegerField()
    node_count = serializers.IntegerField()
    gpus = serializers.IntegerField()
    tensor_parallel = serializers.IntegerField()
    pipeline_parallel = serializers.IntegerField()
    data_parallel = serializers.IntegerField()
    zero_stage = serializers.IntegerField()
    global_batch_size = serializers.IntegerField()
    memory = PlanMemoryOutput()
    megatron_command = serializers.CharField()
