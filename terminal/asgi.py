"""The web terminal service's ASGI entry point: `uvicorn terminal.asgi:application`."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "starverse.settings.dev")
django.setup()

from terminal.app import application  # noqa: E402 - Django is set up first

__all__ = ["application"]
