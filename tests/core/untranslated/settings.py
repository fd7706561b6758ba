"""The test settings with the untranslated app installed."""

from starverse.settings.test import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.core.untranslated"]  # noqa: F405
