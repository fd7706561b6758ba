"""`manage.py totp_reset EMAIL --operator OPS_EMAIL --reason "…"`: for someone who lost their
phone and their recovery codes, after checking who they are. Recorded in the admin's history
of the user (under the operator) and in the log."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from starverse.accounts.models import User, normalize_email
from starverse.accounts.twofactor import totp_reset
from starverse.core.errors import ServiceError


class Command(BaseCommand):
    help = "Remove a user's two-factor authentication (lost phone) and end their sessions."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("email", help="The account whose second factor is lost.")
        parser.add_argument(
            "--operator", required=True, help="E-mail of the operator doing the reset."
        )
        parser.add_argument(
            "--reason", required=True, help="Why, e.g. how the person's identity was checked."
        )

    def _user(self, email: str) -> User:
        user = User.objects.filter(email=normalize_email(email)).first()
        if user is None:
            raise CommandError(f"No account with the e-mail address {email}.")
        return user

    def handle(self, *args: Any, **options: Any) -> None:
        user = self._user(options["email"])
        operator = self._user(options["operator"])
        try:
            removed = totp_reset(user=user, operator=operator, reason=options["reason"])
        except ServiceError as error:
            raise CommandError(error.message) from None
        if removed:
            self.stdout.write(
                f"Two-factor authentication of {user.email} removed; their sessions ended. "
                "They log in with the password alone now"
                + (" and must set it up again." if user.is_staff else ".")
            )
        else:
            self.stdout.write(f"{user.email} had no two-factor authentication; sessions ended.")
