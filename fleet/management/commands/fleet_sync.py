from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import DEFAULT_REGION, Node, Region
from fleet.selectors import region_target
from fleet.services import node_token_issue, nodes_sync_from_cluster
from starverse.core import kube
from starverse.core.kube import KubeError


class Command(BaseCommand):
    help = (
        "Mirror a region's cluster's nodes (GPU and CPU-only) into the fleet (the default "
        "region: KUBECONFIG's). "
        "With --agent-tokens DIR, issue each of its nodes a fresh agent token into "
        "DIR/<node>.token (for the demo's simulated agents)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent-tokens", metavar="DIR")
        parser.add_argument("--region", default=DEFAULT_REGION, help="the region to sync")

    def handle(self, *args: Any, **options: Any) -> None:
        region = Region.objects.filter(pk=options["region"]).first()
        if region is None:
            raise CommandError(f"No region {options['region']!r}: register it first.")
        try:
            with kube.cluster(region_target(region)):
                count = nodes_sync_from_cluster(region=region.name)
        except KubeError as error:
            raise CommandError(f"Cannot read the cluster's nodes: {error}") from error
        self.stdout.write(f"Fleet: {count} node(s) in region {region.name}'s cluster.")
        if options["agent_tokens"]:
            folder = Path(options["agent_tokens"])
            folder.mkdir(parents=True, exist_ok=True)
            # a CPU-only node has no GPUs for an agent to read (no NVML): none for it
            for node in Node.objects.filter(in_cluster=True, region=region, gpu_count__gt=0):
                path = folder / f"{node.name}.token"
                path.write_text(node_token_issue(node=node))
                path.chmod(0o600)
