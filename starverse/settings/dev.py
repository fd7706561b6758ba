"""Embedded defaults for `make run`: SQLite, a file-system broker, console e-mail, under var/."""

from starverse.env import env_bool
from starverse.settings.base import *  # noqa: F403

DEBUG = env_bool("DEBUG", True)

# gunicorn serves static files through WhiteNoise straight from the source folders.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
