from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from fleet.services import region_register


class Command(BaseCommand):
    help = (
        "Register a region (a Kubernetes cluster of GPU nodes), or update one: its display name "
        "and the path of its kubeconfig in the worker's pod (blank: the KUBECONFIG setting)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the region's id, e.g. cn-east-1")
        parser.add_argument("--display-name", default="", help="as users see it, in English")
        parser.add_argument(
            "--display-name-zh-hans", default="", help="as Chinese readers see it (e.g. 华东 1)"
        )
        parser.add_argument("--kubeconfig", default="", help="kubeconfig file, or in-cluster")

    def handle(self, *args: Any, **options: Any) -> None:
        region = region_register(
            name=options["name"],
            display_name=options["display_name"],
            display_name_zh_hans=options["display_name_zh_hans"],
            kubeconfig=options["kubeconfig"],
        )
        self.stdout.write(f"Region {region.name} ({region.display_name}) registered.")
