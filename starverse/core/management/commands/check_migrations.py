"""Refuses a migration that would break the release still serving while it runs, or block a
large table (starverse.core.migration_safety; `make test` runs it). `--release` records the
current migrations as the latest release's, when a release is cut."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.migrations.loader import MigrationLoader

from starverse.core import migration_safety


class Command(BaseCommand):
    help = (
        "Check every migration against the previous release's models and the large tables' "
        "locks; --release records the current migrations as the released ones."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--release",
            action="store_true",
            help="Write deploy/released-migrations.txt from the current migrations.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        loader = MigrationLoader(None, ignore_no_migrations=True)
        if options["release"]:
            count = migration_safety.write_released(loader)
            self.stdout.write(
                f"Released: {count} migration(s) in {migration_safety.RELEASED_FILE}."
            )
            return
        released = migration_safety.released_nodes()
        findings = migration_safety.check(loader, released)
        for finding in findings:
            self.stderr.write(f"REFUSED {finding}")
        if findings:
            raise CommandError(
                f"{len(findings)} migration operation(s) would break the running release or "
                'block a large table (docs/operator-guide.md "Upgrades"): split them as each '
                "line says, or, for one that is safe for a reason this check cannot see, add it "
                "to starverse.core.migration_safety.ALLOWED with that reason."
            )
        new = sum(
            1
            for m in migration_safety.plan(loader)
            if m.app_label in migration_safety.project_apps()
            and (m.app_label, m.name) not in released
        )
        self.stdout.write(
            f"OK: migrations safe for a rolling upgrade ({len(released)} released, {new} new)."
        )
