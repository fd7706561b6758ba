"""Test settings: PostgreSQL (the embedded one unless DATABASE_URL); fast hashing; no network."""

from starverse.settings.base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
CELERY_TASK_ALWAYS_EAGER = True
CELERY_BROKER_URL = "memory://"
CELERY_BROKER_TRANSPORT_OPTIONS = {}
LANGUAGE_CODE = "en"
# Tests change tokens, users and memberships through the ORM too and expect the next request to
# see it; the token cache's own tests turn it on (tests/accounts/test_token_cache.py).
API_TOKEN_CACHE_S = 0

WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
