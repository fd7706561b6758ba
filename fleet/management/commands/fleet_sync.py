from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fleet.models import Node
from fleet.services import node_token_issue, nodes_sync_from_cluster
from starverse.core.kube import KubeError


class Command(BaseCommand):
    help = (
        "Mirror the cluster's GPU nodes into the fleet. With --agent-tokens DIR, issue each "
        "node a fresh agent token into DIR/<node>.token (for the demo's simulated agents)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--agent-tokens", metavar="DIR")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            count = nodes_sync_from_cluster()
        except KubeError as error:
            raise CommandError(f"Cannot read the cluster's nodes: {error}") from error
        self.stdout.write(f"Fleet: {count} GPU node(s) in the cluster.")
        if options["agent_tokens"]:
            folder = Path(options["agent_tokens"])
            folder.mkdir(parents=True, exist_ok=True)
            for node in Node.objects.filter(in_cluster=True):
                path = folder / f"{node.name}.token"
                path.write_text(node_token_issue(node=node))
                path.chmod(0o600)
