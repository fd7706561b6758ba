from typing import Any

from django.core.management.base import BaseCommand

from billing.onboarding import user_create_operator
from starverse.accounts.models import User
from starverse.env import env_str

DEMO_OPERATOR = "admin@starverse.local"


class Command(BaseCommand):
    help = "Seed the embedded demo: an operator account for the admin. Safe to run repeatedly."

    def handle(self, *args: Any, **options: Any) -> None:
        password = env_str("STARVERSE_ADMIN_PASSWORD", "Demo-operator-2026")
        if not User.objects.filter(email=DEMO_OPERATOR).exists():
            user_create_operator(email=DEMO_OPERATOR, password=password)
            self.stdout.write(f"Demo operator: {DEMO_OPERATOR} / {password} (change it in /admin/)")
        else:
            self.stdout.write(f"Demo operator {DEMO_OPERATOR} exists.")
