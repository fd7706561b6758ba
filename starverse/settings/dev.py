"""Embedded defaults for `make run`, under var/: PostgreSQL, a file-system broker, e-mail files."""

from typing import Any, cast

from starverse.env import env_bool, env_str
from starverse.settings.base import *  # noqa: F403
from starverse.settings.base import METRICS_ALLOWED_CIDRS, METRICS_TOKEN, TEMPLATES

# Off, as in production, so that `make run` shows what a user sees: the console's own 404 and
# 500 pages (templates/404.html, 500.html), which Django replaces with its technical pages
# whenever DEBUG is on (a stranger's address would list every route). `DEBUG=1 make run` brings
# those back; a 500's traceback is in var/log/gunicorn.log either way.
DEBUG = env_bool("DEBUG", False)

# gunicorn serves static files through WhiteNoise straight from the source folders, and picks up
# an edited file or template at its next request, DEBUG or not. DEV_AUTORELOAD=0 turns the
# picking up off (each request then skips a look at every template's and file's time, as in
# production): `make load` measures the platform so (tests/load).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = env_bool("DEV_AUTORELOAD", True)
_jinja = TEMPLATES[0]
TEMPLATES = [
    {
        **_jinja,
        "OPTIONS": {
            **cast(dict[str, Any], _jinja["OPTIONS"]),
            "auto_reload": WHITENOISE_AUTOREFRESH,
        },
    },
    *TEMPLATES[1:],
]
# /metrics stays open to this machine, as it was with DEBUG on.
if not METRICS_TOKEN and not METRICS_ALLOWED_CIDRS:
    METRICS_ALLOWED_CIDRS = ["127.0.0.1/32", "::1/128"]

# bin/run exports it when the emulator's pods run no sshd (no MAKE_RUN_SSHD=1).
DEV_PODS_WITHOUT_SSHD = env_bool("DEV_PODS_WITHOUT_SSHD", False)
# The job form's demo: the emulator's simulated trainer (docs/architecture.md), which logs a step
# a second, checkpoints to STARVERSE_CHECKPOINT_DIR and resumes from it after a lost node.
JOB_DEMO_COMMAND = env_str("JOB_DEMO_COMMAND", "starverse-sim-train --steps 300 --step-seconds 1")

# Each e-mail one file under var/mail/: the links in them (verification, password reset) are
# one-time secrets, which the logs redact, so the log is no place to read them.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
EMAIL_FILE_PATH = str(VAR_DIR / "mail")  # noqa: F405
