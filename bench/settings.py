"""Settings for the API benchmark: the dev settings plus a bare baseline view."""

from starverse.settings.dev import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
DEBUG = False
# Tasks the measured code sends are not run here (each benchmark drives the work itself): an
# in-memory broker needs no var/ folder from `make run` and puts no file I/O in the timings.
CELERY_BROKER_URL = "memory://"
CELERY_BROKER_TRANSPORT = None  # not the embedded file-system broker base picks without Redis
CELERY_BROKER_TRANSPORT_OPTIONS = {}
