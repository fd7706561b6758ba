"""Writes what bin/messages extracts besides the Python sources and the console's templates:
the models' names (starverse.core.modelwords) as gettext_noop calls, and the admin's Django
templates of the project's apps as Python (Django's templatize). Fails while a changelist
column or action of the admin has a label not marked for translation."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.translation.template import templatize

from starverse.core import modelwords


class Command(BaseCommand):
    help = "Write the models' names and the admin templates' strings for bin/messages."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", help="Where the .py files go (emptied first).")

    def handle(self, *args: Any, **options: Any) -> None:
        unmarked = modelwords.unmarked_labels()
        if unmarked:
            raise CommandError("admin labels not marked for translation: " + "; ".join(unmarked))
        out = Path(options["directory"])
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.py"):
            old.unlink()
        names = "".join(f"gettext_noop({word!r})\n" for word in modelwords.words())
        (out / "models.py").write_text(names, encoding="utf-8")
        for app in modelwords.project_apps():
            for template in sorted(Path(app.path, "templates", "admin").rglob("*.html")):
                relative = template.relative_to(app.path).with_suffix("")
                name = f"{app.label}-" + "-".join(relative.parts) + ".py"
                text = template.read_text(encoding="utf-8")
                (out / name).write_text(templatize(text, origin=str(template)), encoding="utf-8")
