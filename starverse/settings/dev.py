"""Embedded defaults for `make run`, under var/: PostgreSQL, a file-system broker, e-mail files."""

from starverse.env import env_bool, env_str
from starverse.settings.base import *  # noqa: F403

DEBUG = env_bool("DEBUG", True)

# gunicorn serves static files through WhiteNoise straight from the source folders.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# Each e-mail one file under var/mail/: the links in them (verification, password reset) are
# one-time secrets, which the logs redact, so the log is no place to read them.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
EMAIL_FILE_PATH = str(VAR_DIR / "mail")  # noqa: F405
