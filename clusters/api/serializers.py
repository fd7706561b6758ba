from typing import Any

from rest_framework import serializers

from clusters.choices import ClusterStatus, Template
from clusters.models import PreflightStatus
from instances.choices import BillingMode, InstanceStatus
from starverse.core.api.serializers import InputSerializer, StrictCharField


class ClusterCreateInput(InputSerializer):
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
    billing = serializers.ChoiceField(
        choices=BillingMode.choices, required=False, default=BillingMode.HOURLY
    )


class RankOutput(serializers.Serializer):
    rank = serializers.IntegerField()
    instance = serializers.CharField(help_text="The rank's instance id.")
    node = serializers.CharField(allow_null=True)
    switch = serializers.CharField(allow_null=True, help_text="The node's leaf switch.")
    status = serializers.ChoiceField(choices=InstanceStatus.choices)
    host = serializers.CharField(
        allow_null=True, help_text="The rank's stable DNS name inside the cluster."
    )


class PreflightPairOutput(serializers.Serializer):
    round = serializers.IntegerField()
    ranks = serializers.ListField(child=serializers.IntegerField())
    hosts = serializers.ListField(child=serializers.CharField())
    busbw_gbps = serializers.FloatField()


class PreflightBadNodeOutput(serializers.Serializer):
    rank = serializers.IntegerField()
    node = serializers.CharField()


class PreflightOutput(serializers.Serializer):
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
    bad_nodes = PreflightBadNodeOutput(many=True, help_text="Cordoned and replaced.")
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class ClusterOutput(serializers.Serializer):
    """A cluster: its derived status, its ranks and where they run, and what it cost."""

    id = serializers.CharField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=ClusterStatus.choices)
    offering = serializers.CharField()
    image = serializers.CharField()
    gpu_model = serializers.CharField()
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
        child=serializers.CharField(), help_text="Launch commands by name."
    )
    created_at = serializers.DateTimeField()

    def to_representation(self, view: Any) -> dict[str, Any]:
        cluster = view.cluster
        return {
            "id": cluster.id,
            "name": cluster.name,
            "status": view.status,
            "offering": cluster.offering_id,
            "image": cluster.image_id,
            "gpu_model": cluster.offering.gpu_model_id,
            "node_count": cluster.node_count,
            "template": cluster.template,
            "billing": cluster.billing,
            "price_per_hour_fen": cluster.offering.price_per_hour_fen * cluster.node_count,
            "switches_spanned": view.switches_spanned,
            "queue_position": view.queue_position,
            "ranks": [
                {
                    "rank": rank.rank,
                    "instance": rank.id,
                    "node": node.name if node else None,
                    "switch": (node.switch or None) if node else None,
                    "status": rank.status,
                    "host": None,
                }
                for rank, node in ((rank, view.node_of(rank)) for rank in view.ranks)
            ],
            "preflight": PreflightOutput(view.preflight).data if view.preflight else None,
            "cost_fen": view.cost_fen,
            "launch": {},
            "created_at": serializers.DateTimeField().to_representation(cluster.created_at),
        }


class ClusterEventOutput(serializers.Serializer):
    at = serializers.DateTimeField()
    rank = serializers.IntegerField(source="instance.rank")
    status = serializers.CharField()
    message = serializers.CharField(source="text", help_text="In the request's language.")


class RankMetricsOutput(serializers.Serializer):
    rank = serializers.IntegerField()
    gpus = serializers.ListField(child=serializers.DictField(), help_text="As instance metrics.")


class ClusterMetricsOutput(serializers.Serializer):
    results = RankMetricsOutput(many=True)
