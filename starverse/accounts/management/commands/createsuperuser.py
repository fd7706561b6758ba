"""`manage.py createsuperuser`, Starverse's way: the operator is made by the accounts service,
which also opens its tenant and wallet (operators get no trial credit). It replaces the command
of django.contrib.auth (starverse.accounts is listed before it), whose only way in would be a
model manager calling the service."""

import getpass
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing.onboarding import user_create_operator
from starverse.core.errors import ServiceError


class Command(BaseCommand):
    help = "Create an operator (staff and superuser) with its tenant and wallet."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--email", help="The operator's e-mail address.")
        parser.add_argument(
            "--noinput",
            "--no-input",
            action="store_false",
            dest="interactive",
            help="Ask nothing: the address comes from --email or DJANGO_SUPERUSER_EMAIL, the "
            "password from DJANGO_SUPERUSER_PASSWORD.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["interactive"]:
            email, password = self._ask(options["email"])
        else:
            email, password = self._from_environment(options["email"])
        try:
            user_create_operator(email=email, password=password)
        except ServiceError as error:
            raise CommandError(error.message) from None
        if options["verbosity"] >= 1:
            self.stdout.write("Superuser created successfully.")

    def _ask(self, email: str | None) -> tuple[str, str]:
        while not email:
            email = input("Email: ").strip()
        while True:
            password = getpass.getpass()
            if password != getpass.getpass("Password (again): "):
                self.stderr.write("Error: Your passwords didn't match.")
            elif not password.strip():
                self.stderr.write("Error: Blank passwords aren't allowed.")
            else:
                return email, password

    def _from_environment(self, email: str | None) -> tuple[str, str]:
        email = email or os.environ.get("DJANGO_SUPERUSER_EMAIL")
        password = os.environ.get("DJANGO_SUPERUSER_PASSWORD")
        if not email:
            raise CommandError("You must use --email with --noinput.")
        if not password:
            raise CommandError("Set DJANGO_SUPERUSER_PASSWORD with --noinput.")
        return email, password
