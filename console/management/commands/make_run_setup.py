import io
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = (
        "`make run`'s set-up in one process (one start of Django instead of five, which on a "
        "busy machine is most of a first run): migrate, the demo operator, the catalog, the "
        "public pool, and the catalogue's image sizes for the Kubernetes emulator."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("image_sizes", help="where to write the image sizes (JSON)")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        for seed in ("seed_demo", "seed_catalog", "seed_datasets"):
            call_command(seed, stdout=self.stdout)
        call_command("catalog_image_sizes", options["image_sizes"], stdout=io.StringIO())
