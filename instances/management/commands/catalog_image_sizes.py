import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from compute.models import Image
from instances.provisioning.prepull import PAUSE_IMAGE_BYTES


class Command(BaseCommand):
    help = (
        "Write the catalogue's image sizes as JSON (reference -> bytes): what a registry would "
        "tell the local Kubernetes emulator (`python -m devstack.kube --image-sizes FILE`)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="the JSON file to write")

    def handle(self, *args: Any, **options: Any) -> None:
        sizes = {settings.PREPULL_PAUSE_IMAGE: PAUSE_IMAGE_BYTES}
        sizes |= dict(
            Image.objects.filter(size_bytes__gt=0)
            .order_by("container_image")
            .values_list("container_image", "size_bytes")
        )
        with open(options["path"], "w") as handle:
            json.dump(sizes, handle, indent=1, sort_keys=True)
        self.stdout.write(f"{len(sizes)} image sizes written to {options['path']}.")
