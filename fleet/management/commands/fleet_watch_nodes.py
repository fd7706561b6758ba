import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.liveness import node_leases_follow
from fleet.models import DEFAULT_REGION, Region
from fleet.selectors import region_target
from starverse.core import kube


class Command(BaseCommand):
    help = (
        "Find lost nodes in seconds: watch a region's node Leases (kube-node-lease) like a "
        "controller and take a node down once its kubelet missed two renewals and its agent "
        "is silent too (fleet.liveness). Runs until stopped; one process per region."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--region", default=DEFAULT_REGION, help="the region to watch")

    def handle(self, *args: Any, **options: Any) -> None:
        region = Region.objects.filter(pk=options["region"]).first()
        if region is None:
            raise CommandError(f"No region {options['region']!r}: register it first.")
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        self.stdout.write(f"Watching region {region.name}'s node leases.")
        with kube.cluster(region_target(region)):
            node_leases_follow(region=region.name, stop=stop)
