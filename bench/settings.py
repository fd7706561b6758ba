"""Settings for the API benchmark: the dev settings plus a bare baseline view."""

from starverse.settings.dev import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
DEBUG = False
