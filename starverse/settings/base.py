"""Settings shared by every deployment. Outside values come only through starverse.env."""

import ipaddress
import re
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

from starverse.core import redis_sentinel
from starverse.core.sites import exact_origin, origin_host, origin_of, under_domain
from starverse.env import env_bool, env_int, env_list, env_optional, env_str

# Django's generic classes (ModelAdmin[Node], ModelForm[Instance]) subscriptable at run time.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(env_str("STARVERSE_VAR_DIR", str(BASE_DIR / "var")))

SECRET_KEY = env_str("SECRET_KEY", "dev-only-insecure-key-change-me-in-production-0123456789")
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # Django's admin on Starverse's site class (operators need the second factor).
    "starverse.accounts.apps.AdminConfig",
    # Before django.contrib.auth, whose `createsuperuser` its own replaces.
    "starverse.accounts",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "starverse.core",
    "billing",
    "fleet",
    "compute",
    "storage",
    "instances",
    "clusters",
    "jobs",
    "endpoints",
    "datasets",
    "console",
    "teams",
    "events",
]

MIDDLEWARE = [
    "starverse.core.logs.RequestIdMiddleware",
    # A Host of the gateway's domain is answered at /gateway/auth only, before anything else.
    "starverse.core.middleware.GatewayHostMiddleware",
    # /healthz, /readyz and /metrics, answered before the HTTPS redirect and the Host check
    # (probes and scrapers come with the pod's IP as Host, over plain HTTP).
    "console.probes.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "starverse.core.middleware.BadInputMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "starverse.accounts.middleware.ActingTenantMiddleware",
    "starverse.core.logs.ActorMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "starverse.accounts.middleware.StaffTwoFactorMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "starverse.core.csp.ContentSecurityPolicyMiddleware",
]

ROOT_URLCONF = "starverse.urls"
WSGI_APPLICATION = "starverse.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.jinja2.Jinja2",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": False,
        "OPTIONS": {
            "environment": "starverse.jinja2.environment",
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.messages.context_processors.messages",
                "starverse.core.context_processors.console",
                "teams.context.team_switch",
            ],
        },
    },
    {
        # The admin keeps Django templates.
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# PostgreSQL is the only database. Unset, DATABASE_URL is the embedded server that `make run`
# and `make test` start under var/ (devstack/postgres.py, on EMBEDDED_PG_PORT).
_embedded_db = f"postgres://postgres@127.0.0.1:{env_int('EMBEDDED_PG_PORT', 15432)}/starverse"
# Persistent connections are checked before reuse, so a restarted database costs one retry-free
# reconnect instead of an error on the next request.
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", _embedded_db), conn_max_age=60, conn_health_checks=True
    )
}
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured(
        "DATABASE_URL must be a PostgreSQL URL (postgres://user@host:5432/name): Starverse runs "
        "on PostgreSQL only; unset, it is the embedded server of `make run`."
    )
# A database that does not answer fails a request (and /readyz) in seconds, not minutes.
DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
# The hot paths' few costly-to-plan statements are prepared once a session (starverse.core.db.
# execute_prepared, SQL PREPARE). Off behind any pooler in transaction mode: PgBouncer tracks
# only the protocol's prepared statements, never SQL PREPAREs.
DB_PREPARED_STATEMENTS = env_bool("DB_PREPARED_STATEMENTS", True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# redis://… or, for a Redis that fails over, redis+sentinel://… (starverse.core.redis_sentinel)
REDIS_URL = env_optional("REDIS_URL")
if REDIS_URL:
    _location, _options = redis_sentinel.cache_location(REDIS_URL)
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": _location,
            "KEY_PREFIX": "starverse",
            "OPTIONS": _options,
        }
    }
else:
    # Shared between the web process and the workers, so throttles hold across processes.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        }
    }

AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 10},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "console:dashboard"
LOGOUT_REDIRECT_URL = "accounts:login"

LANGUAGE_CODE = "en"
LANGUAGES = [("en", _("English")), ("zh-hans", _("Simplified Chinese"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env_str("TIME_ZONE", "Asia/Shanghai")
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Uploaded and generated files (issued invoices, monthly statements). Never served as static
# files: every download goes through a view that checks whose file it is.
MEDIA_ROOT = env_str("MEDIA_ROOT", str(VAR_DIR / "media"))
# A TrueType font with CJK glyphs for statement PDFs (Debian: fonts-wqy-microhei).
STATEMENT_FONT = env_str("STATEMENT_FONT", "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
# How long the current month's statement files (drawn on request, a PDF of a busy month takes
# seconds) are served again before they are drawn anew.
STATEMENT_SO_FAR_CACHE_S = env_int("STATEMENT_SO_FAR_CACHE_S", 300)
STATICFILES_DIRS = [BASE_DIR / "static"]

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)  # seconds: a hung SMTP server must not hang a worker
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Starverse <noreply@starverse.local>")

# Celery: Redis in production; without REDIS_URL an embedded file-system broker under var/.
CELERY_BROKER_URL, _sentinel_options = (
    redis_sentinel.celery_broker(REDIS_URL) if REDIS_URL else ("filesystem://", {})
)
# kombu's file-system transport, writing each message whole before a worker can see it
CELERY_BROKER_TRANSPORT = None if REDIS_URL else "starverse.core.fsbroker:Transport"
_broker_dir = VAR_DIR / "broker"
CELERY_BROKER_TRANSPORT_OPTIONS = (
    _sentinel_options
    if REDIS_URL
    else {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
)
CELERY_TASK_ACKS_LATE = True
# The longest a task may run, in seconds (0: no limit; the prefork pool only): the chart sets it
# below the worker's terminationGracePeriodSeconds, so a rollout's SIGTERM lets it finish.
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 0) or None
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# The worker logs through LOGGING (JSON or text, with the request id), not Celery's own format.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "billing-audit-hourly": {"task": "billing.tasks.audit_wallets", "schedule": 3600.0},
    "billing-runway-notices": {"task": "endpoints.tasks.check_runways", "schedule": 60.0},
    "metering": {"task": "instances.tasks.meter_usage", "schedule": 60.0},
    # RECONCILE_INTERVAL_S (30): the chaos drill's short version runs it oftener (tests/chaos)
    "reconcile": {
        "task": "instances.tasks.reconcile_cluster",
        "schedule": float(env_int("RECONCILE_INTERVAL_S", 30)),
    },
    # Programs run to their end (jobs): their ends are looked for every few seconds, so a job
    # that ends gives its GPUs back within seconds; each job then follows its ranks.
    "workloads-check": {"task": "instances.tasks.check_workloads", "schedule": 5.0},
    "jobs-sync": {"task": "jobs.tasks.sync_jobs", "schedule": 10.0},
    "monthly-renewals": {"task": "instances.tasks.renew_monthly", "schedule": 600.0},
    "queue-review": {"task": "instances.tasks.review_queue", "schedule": 60.0},
    "auto-stop": {"task": "instances.tasks.auto_stop", "schedule": 60.0},
    "storage-billing": {"task": "storage.tasks.bill_storage", "schedule": 600.0},
    # Webhooks: retries that are due (the first within a minute of a failure), events whose
    # fan-out the broker lost, and deliveries past their 30 days.
    "webhook-retries": {"task": "events.tasks.deliver_due", "schedule": 15.0},
    "events-fan-out": {"task": "events.tasks.fan_out_missed", "schedule": 60.0},
    "webhook-cleanup": {"task": "events.tasks.prune_deliveries", "schedule": 3600.0},
    "nas-usage": {"task": "storage.tasks.refresh_nas_usage", "schedule": 300.0},
    "fleet-heartbeats": {"task": "fleet.tasks.check_heartbeats", "schedule": 15.0},
    "fleet-rollup": {"task": "fleet.tasks.rollup_telemetry", "schedule": 60.0},
    "fleet-prune": {"task": "fleet.tasks.prune_telemetry", "schedule": 3600.0},
    "fleet-sync-cluster": {"task": "fleet.tasks.sync_nodes_from_cluster", "schedule": 30.0},
    # The endpoints' scheduler: binds new replicas' pods (the scale-up bench needs the second
    # replica Ready within 5 s of a burst), follows readiness, bills ready replica-minutes.
    "endpoints-sync": {"task": "endpoints.tasks.sync_endpoints", "schedule": 1.0},
    # endpoints still converging get their task again (one lost with a killed worker, a
    # flushed broker), as the reconcile loop does for instances; the same period
    "endpoints-reconcile": {
        "task": "endpoints.tasks.reconcile_endpoints",
        "schedule": float(env_int("RECONCILE_INTERVAL_S", 30)),
    },
    # the gates of a job's ranks opened again when the task that opens them after a passed
    # pre-flight was lost (clusters.gates); the same period
    "clusters-reconcile": {
        "task": "clusters.tasks.reconcile_clusters",
        "schedule": float(env_int("RECONCILE_INTERVAL_S", 30)),
    },
    "tenant-namespaces": {"task": "instances.tasks.converge_tenant_namespaces", "schedule": 300.0},
    "image-prepull": {"task": "instances.tasks.converge_prepull", "schedule": 300.0},
    # saved images' build pods, followed again (their own task follows each already)
    "images-saving": {"task": "instances.tasks.follow_saving_images", "schedule": 60.0},
    # Last month's statements, early on the 1st (TIME_ZONE); a rerun keeps those made before.
    "billing-monthly-statements": {
        "task": "billing.tasks.generate_statements",
        "schedule": crontab(minute=30, hour=1, day_of_month=1),
    },
    "billing-retry-stripe-events": {
        "task": "billing.tasks.retry_unprocessed_events",
        "schedule": float(env_int("RECONCILE_INTERVAL_S", 30)),
    },
}
CELERY_TIMEZONE = TIME_ZONE

# Reverse proxies of ours in front of the web tier (the chart's ingress is one): the client's
# address is the one the outermost of them appended to X-Forwarded-For (starverse.core.addresses),
# for the audit log, throttles and lockouts, /metrics' METRICS_ALLOWED_CIDRS and the access log.
NUM_PROXIES = env_int("NUM_PROXIES", 0)
if NUM_PROXIES < 0:
    raise ImproperlyConfigured(f"NUM_PROXIES must be 0 or more, got {NUM_PROXIES}.")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "starverse.accounts.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "starverse.accounts.permissions.TokenScope",
        "starverse.accounts.permissions.PersonalRoute",
    ],
    "DEFAULT_PAGINATION_CLASS": "starverse.core.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["starverse.core.api.parsers.JSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "starverse.core.api.negotiation.ContentNegotiation",
    "EXCEPTION_HANDLER": "starverse.core.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "starverse.core.api.schema.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": [
        "starverse.core.api.throttling.UserRateThrottle",
        "starverse.core.api.throttling.AnonRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": env_str("API_THROTTLE_RATE", "600/minute"),
        "anon": env_str("ANON_THROTTLE_RATE", "120/minute"),
        "signup": env_str("SIGNUP_THROTTLE_RATE", "20/hour"),
        "login": env_str("LOGIN_THROTTLE_RATE", "30/hour"),
        "verify_email_resend": env_str("VERIFY_EMAIL_RESEND_RATE", "3/hour"),
    },
    "NUM_PROXIES": NUM_PROXIES,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

# Console and admin log-in: failures counted per account and per client address over a window;
# password-reset requests per address and per target e-mail over the same window.
LOGIN_FAILURES_PER_ACCOUNT = env_int("LOGIN_FAILURES_PER_ACCOUNT", 10)
LOGIN_FAILURES_PER_ADDRESS = env_int("LOGIN_FAILURES_PER_ADDRESS", 30)
LOGIN_FAILURE_WINDOW_MINUTES = env_int("LOGIN_FAILURE_WINDOW_MINUTES", 15)
PASSWORD_RESET_REQUESTS_PER_ADDRESS = env_int("PASSWORD_RESET_REQUESTS_PER_ADDRESS", 10)
PASSWORD_RESET_REQUESTS_PER_EMAIL = env_int("PASSWORD_RESET_REQUESTS_PER_EMAIL", 3)
# Two-factor authentication (TOTP): operators cannot use the console, the admin or a token
# log-in until they have it; with REQUIRE_2FA_FOR_API_TOKENS, nobody creates an API token
# without it (a token would otherwise be a way round the second factor).
REQUIRE_2FA_FOR_STAFF = env_bool("REQUIRE_2FA_FOR_STAFF", True)
REQUIRE_2FA_FOR_API_TOKENS = env_bool("REQUIRE_2FA_FOR_API_TOKENS", False)
# How long a process keeps an API token that authenticated (starverse.accounts.token_cache):
# a revocation, a deactivation or a team change made in another process takes effect within it.
API_TOKEN_CACHE_S = env_int("API_TOKEN_CACHE_S", 2)

SPECTACULAR_SETTINGS = {
    "TITLE": "Starverse API",
    "DESCRIPTION": "Rent GPU nodes and cloud-GPU instances, billed per minute in CNY.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "InstanceStatusEnum": "instances.choices.InstanceStatus",
        "TopUpStatusEnum": "billing.choices.TopUpStatus",
        "NodeStateEnum": "fleet.choices.NodeState",
        "PublicDatasetKindEnum": "datasets.choices.DatasetKind",
        "TrialStatusEnum": "billing.choices.TrialStatus",
        "InvoiceKindEnum": "billing.choices.InvoiceKind",
        "JobStatusEnum": "jobs.choices.JobStatus",
        "BillingEnum": "compute.choices.BillingMode",
        "JobBillingEnum": "jobs.choices.JobBilling",
        "WebhookStatusEnum": "events.choices.WebhookStatus",
        "DeliveryStatusEnum": "events.choices.DeliveryStatus",
        "ChannelKindEnum": "events.choices.ChannelKind",
    },
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Money and product rules.
TRIAL_CREDIT_FEN = env_int("TRIAL_CREDIT_FEN", 1000)
# The trial is given once per canonical address, after the address is verified by an e-mailed
# link (valid this many days). False: given at sign-up, as private deployments may prefer.
TRIAL_REQUIRES_VERIFICATION = env_bool("TRIAL_REQUIRES_VERIFICATION", True)
EMAIL_VERIFICATION_DAYS = env_int("EMAIL_VERIFICATION_DAYS", 3)


def logging_config(log_format: str) -> dict[str, Any]:
    """LOG_FORMAT=json: one JSON object per line (starverse.core.logs.JsonFormatter), for a log
    collector; text: key=value lines for a person. Both carry the request id."""
    if log_format not in ("json", "text"):
        raise ImproperlyConfigured(f"LOG_FORMAT must be json or text, got {log_format!r}.")
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "kv": {
                "format": "%(asctime)s level=%(levelname)s logger=%(name)s "
                "request_id=%(request_id)s %(message)s"
            },
            "json": {"()": "starverse.core.logs.JsonFormatter"},
        },
        "filters": {
            "no_url_secrets": {"()": "starverse.access_log.RedactUrlSecrets"},
            "context": {"()": "starverse.core.logs.ContextFilter"},
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "kv" if log_format == "text" else "json",
                "filters": ["no_url_secrets", "context"],
            }
        },
        "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
        "loggers": {"django.db.backends": {"level": "WARNING"}},
    }


LOGGING = logging_config(env_str("LOG_FORMAT", "text"))

# Payments. Without STRIPE_SECRET_KEY the platform talks to the local Stripe stand-in
# (devstack.stripe, started by `make run`) with demo keys — labelled as a demo wherever shown.
DEMO_STRIPE_KEY = "sk_test_starverse_demo"  # the local stand-in's key, not a secret
STRIPE_SECRET_KEY = env_str("STRIPE_SECRET_KEY", DEMO_STRIPE_KEY)
STRIPE_DEMO = STRIPE_SECRET_KEY == DEMO_STRIPE_KEY
STRIPE_WEBHOOK_SECRETS = env_list("STRIPE_WEBHOOK_SECRET", ["whsec_starverse_demo"])
STRIPE_API_BASE = env_str("STRIPE_API_BASE", "http://127.0.0.1:12111" if STRIPE_DEMO else "")
STRIPE_LIVEMODE = STRIPE_SECRET_KEY.startswith(("sk_live_", "rk_live_"))
STRIPE_PAYMENT_METHODS = env_list("STRIPE_PAYMENT_METHODS", ["card", "alipay", "wechat_pay"])
STRIPE_TIMEOUT_SECONDS = env_int("STRIPE_TIMEOUT_SECONDS", 10)
STRIPE_MAX_NETWORK_RETRIES = env_int("STRIPE_MAX_NETWORK_RETRIES", 2)
PUBLIC_BASE_URL = env_str("PUBLIC_BASE_URL", "http://127.0.0.1:8000")
TOPUP_MIN_FEN = env_int("TOPUP_MIN_FEN", 1_000)
TOPUP_MAX_FEN = env_int("TOPUP_MAX_FEN", 1_000_000)
TOPUP_PRESETS_FEN = [5_000, 10_000, 50_000, 100_000]
TOPUP_CHECKOUT_MINUTES = 30
# Operator adjustments larger than this (in fen, either sign) need a second operator's approval.
ADJUSTMENT_APPROVAL_THRESHOLD_FEN = env_int("ADJUSTMENT_APPROVAL_THRESHOLD_FEN", 100_000)
# Bank transfers and reversals above the threshold need a second operator too. What one
# operator may post in a day by adjustments, bank transfers and reversals (either sign) without
# one, so that a large adjustment cannot be split into many small ones.
ADMIN_DAILY_CAP_FEN = env_int("ADMIN_DAILY_CAP_FEN", 500_000)
# Who is mailed about chargebacks and refunds made in the Stripe dashboard (comma-separated);
# empty = every active superuser.
OPERATOR_EMAILS = env_list("OPERATOR_EMAILS", [])

# Fleet. KUBECONFIG points at the cluster (the local emulator's var/kubeconfig under `make run`,
# "in-cluster" for the pod's own service-account token); without it the platform runs with no
# cluster. Agents join with NODE_BOOTSTRAP_TOKEN.
KUBECONFIG = env_optional("KUBECONFIG")
# Whether this process may talk to the cluster: only the Celery worker does (true). The web
# tier runs with KUBE_ACCESS=false and no credentials; a call from it is refused
# (KubeAccessRefused). The web terminal service runs with KUBE_ACCESS=exec: it may only open exec
# sessions into tenant pods.
_kube_access = env_str("KUBE_ACCESS", "true").strip().lower()
if _kube_access not in ("true", "1", "yes", "on", "false", "0", "no", "off", "", "exec"):
    raise ImproperlyConfigured(f"KUBE_ACCESS must be true, false or exec, got {_kube_access!r}.")
KUBE_ACCESS: bool | str = "exec" if _kube_access == "exec" else env_bool("KUBE_ACCESS", True)
# The instance page says its SSH command answers nothing when the pods are `make run`'s emulated
# ones without sshd (starverse.settings.dev reads it; bin/run exports it): never elsewhere.
DEV_PODS_WITHOUT_SSHD = False
# A command the job form offers to fill in as a demo (blank: none). `make run` sets the Kubernetes
# emulator's simulated trainer (starverse.settings.dev), which exists only there.
JOB_DEMO_COMMAND = ""
# The worker's service account ("namespace/name"), bound to the starverse-tenant ClusterRole in
# each tenant namespace by a RoleBinding the worker makes with the namespace; the terminal
# service's, bound to starverse-exec (pods/exec) the same way.
KUBE_WORKER_SERVICE_ACCOUNT = env_str(
    "KUBE_WORKER_SERVICE_ACCOUNT", "starverse-system/starverse-worker"
)
KUBE_TERMINAL_SERVICE_ACCOUNT = env_str(
    "KUBE_TERMINAL_SERVICE_ACCOUNT", "starverse-system/starverse-terminal"
)
for _name, _account in (
    ("KUBE_WORKER_SERVICE_ACCOUNT", KUBE_WORKER_SERVICE_ACCOUNT),
    ("KUBE_TERMINAL_SERVICE_ACCOUNT", KUBE_TERMINAL_SERVICE_ACCOUNT),
):
    if _account.count("/") != 1 or not all(_account.split("/")):
        raise ImproperlyConfigured(
            f"{_name} must be namespace/name, e.g. starverse-system/starverse-worker."
        )
# The periodic pass that brings tenant namespaces, their RoleBinding and NetworkPolicy up to
# date paces its API calls to this many a second (it runs against the production API server).
TENANT_SWEEP_CALLS_PER_S = env_int("TENANT_SWEEP_CALLS_PER_S", 10)
NODE_BOOTSTRAP_TOKEN = env_optional("NODE_BOOTSTRAP_TOKEN")
INSTANCE_STORAGE_CLASS = env_optional("INSTANCE_STORAGE_CLASS")
# Registries tenants may bring images from (POST /images): host names as in a reference
# (docker.io for Docker Hub); "*" allows any.
IMAGE_ALLOWED_REGISTRIES = env_list(
    "IMAGE_ALLOWED_REGISTRIES", ["docker.io", "nvcr.io", "ghcr.io", "quay.io", "registry.k8s.io"]
)
# Saved images (POST /instances/{id}/image) are pushed to the operator's registry under the
# tenant's own repository, IMAGE_REGISTRY/t-<tenant>/<name>:<tag>, by a build pod in the tenant
# namespace (instances.provisioning.saving): IMAGE_PUSHER_IMAGE runs `crane append`, with
# IMAGE_REGISTRY_USERNAME/PASSWORD (if any) as a Secret only that container mounts; nodes pull
# from the registry with their own configuration, as they pull the catalogue's images.
IMAGE_REGISTRY = env_str("IMAGE_REGISTRY", "127.0.0.1:5000")
IMAGE_REGISTRY_INSECURE = env_bool("IMAGE_REGISTRY_INSECURE", False)  # plain HTTP (make run)
IMAGE_REGISTRY_USERNAME = env_str("IMAGE_REGISTRY_USERNAME", "")
IMAGE_REGISTRY_PASSWORD = env_str("IMAGE_REGISTRY_PASSWORD", "")
IMAGE_PUSHER_IMAGE = env_str("IMAGE_PUSHER_IMAGE", "gcr.io/go-containerregistry/crane:v0.20.2")
# The platform's init toolset (deploy/init-image/Dockerfile: static tini and sshd, the init
# package and its entrypoint), copied by every instance pod's first init container into an
# emptyDir at /opt/starverse, so that any image with a POSIX shell gets SSH, Jupyter and the
# environment without a rebuild (docs/operator-guide.md, "The init toolset").
INIT_IMAGE = env_str("INIT_IMAGE", "starverse/init:0.1.0")
# Academic mirrors (学术加速) instances get in their environment unless the user turns them off
# (instances.mirrors): empty = none of that kind. MIRROR_CONDA_CHANNELS and MIRROR_REGISTRIES
# are comma-separated; the registries are only shown in the console for now.
MIRROR_PIP_INDEX_URL = env_str("MIRROR_PIP_INDEX_URL", "")
MIRROR_CONDA_CHANNELS = env_list("MIRROR_CONDA_CHANNELS", [])
MIRROR_HF_ENDPOINT = env_str("MIRROR_HF_ENDPOINT", "")
MIRROR_GITHUB_PROXY = env_str("MIRROR_GITHUB_PROXY", "")
MIRROR_REGISTRIES = env_list("MIRROR_REGISTRIES", [])
# Cloud disks and the shared NAS: network-backed StorageClasses (e.g. Ceph RBD for disks,
# CephFS or NFS for the ReadWriteMany NAS); empty = the cluster's default class.
DISK_STORAGE_CLASS = env_optional("DISK_STORAGE_CLASS")
NAS_STORAGE_CLASS = env_optional("NAS_STORAGE_CLASS")
DISK_MAX_GB = env_int("DISK_MAX_GB", 16_384)
DISKS_PER_TENANT = env_int("DISKS_PER_TENANT", 50)
NAS_MAX_GB = env_int("NAS_MAX_GB", 102_400)
# Unpaid storage is kept this long (warnings at 7, 3 and 1 days left), then deleted.
STORAGE_GRACE_DAYS = env_int("STORAGE_GRACE_DAYS", 15)
# The read-only public pool, mounted at /public (docs/operator-guide.md "The public pool"):
# "nfs://server/export" (an inline NFS volume), "pvc://claim" (a ReadOnlyMany claim the worker makes
# in each tenant namespace from PUBLIC_POOL_STORAGE_CLASS) or "hostpath:///dir" (development only:
# production refuses it unless PUBLIC_POOL_ALLOW_HOSTPATH is set). Always read-only, volume and
# mount.
PUBLIC_POOL_SOURCE = env_str("PUBLIC_POOL_SOURCE", "hostpath:///srv/starverse/public")
PUBLIC_POOL_STORAGE_CLASS = env_optional("PUBLIC_POOL_STORAGE_CLASS")
PUBLIC_POOL_ALLOW_HOSTPATH = env_bool("PUBLIC_POOL_ALLOW_HOSTPATH", False)
_pool_scheme, _pool_sep, _pool_rest = PUBLIC_POOL_SOURCE.partition("://")
if (
    not _pool_sep
    or _pool_scheme not in ("nfs", "pvc", "hostpath")
    or (_pool_scheme == "nfs" and not re.fullmatch(r"[^/\s]+/\S*", _pool_rest))
    or (_pool_scheme == "pvc" and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", _pool_rest))
    or (_pool_scheme == "hostpath" and not _pool_rest.startswith("/"))
):
    raise ImproperlyConfigured(
        "PUBLIC_POOL_SOURCE must be nfs://server/export/path, pvc://claim-name or "
        f"hostpath:///absolute/dir, got {PUBLIC_POOL_SOURCE!r}."
    )
if _pool_scheme == "pvc" and not PUBLIC_POOL_STORAGE_CLASS:
    raise ImproperlyConfigured(
        "PUBLIC_POOL_SOURCE=pvc://… needs PUBLIC_POOL_STORAGE_CLASS: the StorageClass whose "
        "ReadOnlyMany claims all reach the public pool's share."
    )
# The web terminal (docs/user-guide.md "Terminal"): its own ASGI service (terminal/), which the
# console's pages reach at TERMINAL_URL (ws:// or wss://; by default the console's own address,
# where an Ingress routes /terminal/ to it). A session with no keystroke for this many minutes
# closes.
TERMINAL_URL = env_str(
    "TERMINAL_URL", re.sub(r"^http", "ws", PUBLIC_BASE_URL.rstrip("/"), count=1)
).rstrip("/")
if not re.fullmatch(r"wss?://[^/\s]+", TERMINAL_URL):
    raise ImproperlyConfigured(
        f"TERMINAL_URL must be ws://host[:port] or wss://host[:port], got {TERMINAL_URL!r}."
    )
TERMINAL_IDLE_MINUTES = env_int("TERMINAL_IDLE_MINUTES", 30)
# An open terminal checks its console session and the person's right to the instance again at
# least this often (and at once on a log-out, a new password, a deactivation …: terminal.watch).
TERMINAL_RECHECK_S = env_int("TERMINAL_RECHECK_S", 60)
# Where users reach their instances' SSH node ports.
SSH_GATEWAY_HOST = env_str("SSH_GATEWAY_HOST", "127.0.0.1")
# The HTTPS gateway (docs/operator-guide.md "The HTTPS gateway"): Jupyter and each port an instance
# declares answer at <scheme>://ins-<id>-<port>.<GATEWAY_DOMAIN>/. `make run`'s development gateway
# listens on localhost:8002 (*.localhost resolves to this machine in browsers and curl);
# production names a wildcard domain of its own, served over https only.
GATEWAY_DOMAIN = env_str("GATEWAY_DOMAIN", "localhost:8002").strip().lower().rstrip(".")
if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?", GATEWAY_DOMAIN):
    raise ImproperlyConfigured(
        f"GATEWAY_DOMAIN must be a domain name (with a port, for development), got "
        f"{GATEWAY_DOMAIN!r}."
    )
_gateway_host = GATEWAY_DOMAIN.split(":")[0]
_local_gateway = _gateway_host == "localhost" or _gateway_host.endswith(".localhost")
GATEWAY_SCHEME = env_str("GATEWAY_SCHEME", "http" if _local_gateway else "https")
if GATEWAY_SCHEME not in ("http", "https"):
    raise ImproperlyConfigured(f"GATEWAY_SCHEME must be http or https, got {GATEWAY_SCHEME!r}.")
# How long the gateway's cookie (one address, one person or share link) lasts before the
# browser passes through the console's log-in again.
GATEWAY_SESSION_HOURS = env_int("GATEWAY_SESSION_HOURS", 12)
# `namespace/name` of the Gateway (Gateway API) the instances' HTTPRoutes attach to.
GATEWAY_ROUTE_PARENT = env_str("GATEWAY_ROUTE_PARENT", "starverse-gateway/instances")
if not re.fullmatch(r"[a-z0-9-]+/[a-z0-9-]+", GATEWAY_ROUTE_PARENT):
    raise ImproperlyConfigured(
        f"GATEWAY_ROUTE_PARENT must be namespace/name, got {GATEWAY_ROUTE_PARENT!r}."
    )
# The proxy's authorization check reaches the console with the gateway address as its Host;
# every other path refuses such a Host (starverse.core.middleware.GatewayHostMiddleware).
ALLOWED_HOSTS = [*ALLOWED_HOSTS, "." + _gateway_host]
# Pages that may open the web terminal (a root shell in the visitor's instance): the console's
# own origin (PUBLIC_BASE_URL) and these exact origins, never by pattern, never on the gateway's
# domain, whose pages are tenants' content.
TERMINAL_ALLOWED_ORIGINS = env_list("TERMINAL_ALLOWED_ORIGINS", [])
for _name, _url in [
    ("PUBLIC_BASE_URL", PUBLIC_BASE_URL),
    *(("TERMINAL_ALLOWED_ORIGINS", entry) for entry in TERMINAL_ALLOWED_ORIGINS),
]:
    _origin = exact_origin(_url) if _name == "TERMINAL_ALLOWED_ORIGINS" else origin_of(_url)
    if not _origin:
        raise ImproperlyConfigured(
            f"{_name} must list origins such as https://console.example.com, got {_url!r}."
        )
    if under_domain(origin_host(_origin), GATEWAY_DOMAIN):
        raise ImproperlyConfigured(
            f"{_name} {_url!r} is on GATEWAY_DOMAIN, which serves tenants' pages: the console "
            "needs an address of its own."
        )
TERMINAL_ALLOWED_ORIGINS = [exact_origin(entry) for entry in TERMINAL_ALLOWED_ORIGINS]
# Observability. /metrics answers the bearer token METRICS_TOKEN or addresses in
# METRICS_ALLOWED_CIDRS; with neither it is open only with DEBUG on (make run). The Celery
# worker serves its own in-process metrics on METRICS_PORT (0: not at all). /readyz gives each
# dependency this long to answer.
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
METRICS_ALLOWED_CIDRS = env_list("METRICS_ALLOWED_CIDRS", [])
for _cidr in METRICS_ALLOWED_CIDRS:
    try:
        ipaddress.ip_network(_cidr)
    except ValueError:
        raise ImproperlyConfigured(
            f"METRICS_ALLOWED_CIDRS must list CIDRs, got {_cidr!r}."
        ) from None
METRICS_PORT = env_int("METRICS_PORT", 0)
READYZ_TIMEOUT_S = float(env_int("READYZ_TIMEOUT_MS", 2000)) / 1000

# Webhooks and chat bots (events/): addresses their URLs may resolve to although internal
# (loopback, private, link-local, the cluster's ranges are refused otherwise; `make run` allows
# loopback for a local receiver), the timeouts of one post (connect, each read, the whole
# answer), how long a failing delivery is retried and a failing URL kept enabled, and how long
# deliveries are kept.
WEBHOOK_ALLOWED_CIDRS = env_list("WEBHOOK_ALLOWED_CIDRS", [])
for _cidr in WEBHOOK_ALLOWED_CIDRS:
    try:
        ipaddress.ip_network(_cidr, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"WEBHOOK_ALLOWED_CIDRS must list CIDRs, got {_cidr!r}."
        ) from None
WEBHOOK_CONNECT_TIMEOUT_S = float(env_int("WEBHOOK_CONNECT_TIMEOUT_MS", 3000)) / 1000
WEBHOOK_READ_TIMEOUT_S = float(env_int("WEBHOOK_READ_TIMEOUT_MS", 5000)) / 1000
WEBHOOK_TOTAL_TIMEOUT_S = float(env_int("WEBHOOK_TOTAL_TIMEOUT_MS", 10000)) / 1000
WEBHOOK_RETRY_HOURS = env_int("WEBHOOK_RETRY_HOURS", 24)
WEBHOOK_DELIVERY_DAYS = env_int("WEBHOOK_DELIVERY_DAYS", 30)

PROVISIONING_TIMEOUT_S = env_int("PROVISIONING_TIMEOUT_S", 900)
# The queue. An order whose balance does not cover its runway when its turn comes is passed
# over, and fails (at no cost) after this many minutes unless a top-up covers it first.
QUEUE_UNFUNDED_GRACE_MINUTES = env_int("QUEUE_UNFUNDED_GRACE_MINUTES", 30)
# Interruptible (spot) rentals: the notice a preempted one gets (SIGTERM, and the deadline in
# /etc/starverse/preempt) before its GPUs are taken for a paying order (compute.preemption).
SPOT_PREEMPT_GRACE_S = env_int("SPOT_PREEMPT_GRACE_S", 30)
# Headroom: paying orders of each size (each GPU count a GPU model is offered in) that find
# GPUs free on arrival, in each region, instead of waiting out a spot rental's notice: spot
# keeps off the GPUs best fit would give them were spot gone, and spot holding those is taken
# back with notice beforehand (compute.preemption.headroom). 0: spot may take every idle GPU
# (the most GPUs rented; a paying order then waits one notice whenever spot holds every free
# GPU).
SPOT_HEADROOM = env_int("SPOT_HEADROOM", 0)
# Per-account limits; an operator sets other values for one account in the admin (Tenant
# limits). Trial-only accounts (never topped up) may hold at most one whole node's worth of GPUs
# of the premium models by default, what the trial promises (an hour of a whole 8×H100 node):
# free sign-ups must not be a way to occupy more of the scarce GPUs paying customers wait for.
MAX_QUEUED_ORDERS = env_int("MAX_QUEUED_ORDERS", 5)
MAX_RUNNING_GPUS = env_int("MAX_RUNNING_GPUS", 64)
TRIAL_MAX_PREMIUM_GPUS = env_int("TRIAL_MAX_PREMIUM_GPUS", 8)
# A job's output kept per rank and attempt when its pod goes (instances.models.WorkloadLog):
# its last lines, at most this many bytes of them.
WORKLOAD_LOG_LINES = env_int("WORKLOAD_LOG_LINES", 10_000)
WORKLOAD_LOG_BYTES = env_int("WORKLOAD_LOG_BYTES", 1024 * 1024)
# How long one request that follows a job's log streams before it ends (the client asks again):
# a follower never holds a web thread for ever.
JOB_LOG_FOLLOW_S = env_int("JOB_LOG_FOLLOW_S", 300)

# A lost node in seconds (fleet.liveness): a node is down once its kubelet's Lease (renewed
# every 10 s) has not been seen renewed for this long (two renewals missed in a row, so one
# late renewal never counts) ...
NODE_LEASE_QUIET_S = env_int("NODE_LEASE_QUIET_S", 20)
# ... and its agent silent too: no report since that renewal or within this long (its agent
# reports every 15 s: one report missed).
NODE_AGENT_QUIET_S = env_int("NODE_AGENT_QUIET_S", 20)

# Multi-node clusters: the most whole nodes one cluster may have (2 at least).
CLUSTER_MAX_NODES = env_int("CLUSTER_MAX_NODES", 128)
# The pre-flight check before a cluster is billed: rounds that may fail (the node it blames
# replaced after each) before the cluster fails, how long one round may take, and how long a
# cluster may stay checking in all (unbilled, its GPUs held) before it fails and frees them.
CLUSTER_PREFLIGHT_MAX_ROUNDS = env_int("CLUSTER_PREFLIGHT_MAX_ROUNDS", 3)
CLUSTER_PREFLIGHT_TIMEOUT_S = env_int("CLUSTER_PREFLIGHT_TIMEOUT_S", 300)
CLUSTER_CHECKING_MAX_MINUTES = env_int("CLUSTER_CHECKING_MAX_MINUTES", 30)
# A running round's lease: the worker running it renews it every third of this; a round whose
# lease ran out (its worker killed) is abandoned and the next round starts in its place.
CLUSTER_PREFLIGHT_LEASE_S = env_int("CLUSTER_PREFLIGHT_LEASE_S", 30)
# Tenant pods. Each gets this much node-local scratch (image layers, logs, /tmp) as its
# ephemeral-storage request and limit; the kubelet evicts a pod that writes more.
INSTANCE_EPHEMERAL_STORAGE_GB = env_int("INSTANCE_EPHEMERAL_STORAGE_GB", 50)
# Image pulls: the bandwidth a node typically pulls at (MB/s), for the Rent page's expected
# pull time; where the pre-pull DaemonSets live, their pause image and an optional
# PriorityClass (low, so that tenant pods come first) for their pods.
IMAGE_PULL_BANDWIDTH_MBPS = env_int("IMAGE_PULL_BANDWIDTH_MBPS", 800)
if IMAGE_PULL_BANDWIDTH_MBPS <= 0:
    raise ImproperlyConfigured("IMAGE_PULL_BANDWIDTH_MBPS must be a positive number of MB/s.")
PREPULL_NAMESPACE = env_str("PREPULL_NAMESPACE", "starverse-prepull")
PREPULL_PAUSE_IMAGE = env_str("PREPULL_PAUSE_IMAGE", "registry.k8s.io/pause:3.9")
PREPULL_PRIORITY_CLASS = env_str("PREPULL_PRIORITY_CLASS", "")
# What tenant pods may not reach (their NetworkPolicy's egress `except`): the cluster's pod and
# Service ranges, the API server's address(es) and the nodes' own addresses (the kubelet). The
# link-local metadata range 169.254.0.0/16 is always excluded.
CLUSTER_POD_CIDR = env_list("CLUSTER_POD_CIDR", ["10.244.0.0/16"])
CLUSTER_SERVICE_CIDR = env_list("CLUSTER_SERVICE_CIDR", ["10.96.0.0/12"])
KUBE_API_CIDR = env_list("KUBE_API_CIDR", [])
CLUSTER_NODE_CIDR = env_list("CLUSTER_NODE_CIDR", [])
# Where SSH (22) and Jupyter (8888) may come from: the SSH gateway / the nodes that forward the
# NodePorts. Defaults to CLUSTER_NODE_CIDR; empty = nobody (production refuses to start).
# A whole address space (0.0.0.0/0, ::/0) is refused everywhere.
GATEWAY_CIDR = env_list("GATEWAY_CIDR", CLUSTER_NODE_CIDR)
for _name, _cidrs in (
    ("CLUSTER_POD_CIDR", CLUSTER_POD_CIDR),
    ("CLUSTER_SERVICE_CIDR", CLUSTER_SERVICE_CIDR),
    ("KUBE_API_CIDR", KUBE_API_CIDR),
    ("CLUSTER_NODE_CIDR", CLUSTER_NODE_CIDR),
    ("GATEWAY_CIDR", GATEWAY_CIDR),
):
    for _cidr in _cidrs:
        try:
            _network = ipaddress.ip_network(_cidr)
        except ValueError:
            raise ImproperlyConfigured(f"{_name} must list CIDRs, got {_cidr!r}.") from None
        if _name == "GATEWAY_CIDR" and _network.prefixlen == 0:
            raise ImproperlyConfigured(
                "GATEWAY_CIDR must not be a whole address space: name the gateway's range."
            )
PROVISIONING_POLL_S = 1
# How long an instance waits on the cluster (provisioning, checking, stopping, terminating)
# without a sign of its task before the reconcile loop hands its work out again (a worker
# killed mid-task, the broker's queue lost).
RECONCILE_STUCK_AFTER_S = env_int("RECONCILE_STUCK_AFTER_S", 60)

# Inference endpoints (endpoints/). In-flight requests per replica the autoscaler aims at
# (the HTTPScaledObject's concurrency target); how long a replica stays after the last request
# before the endpoint scales down (to zero when its minimum is 0); how long the gateway holds a
# request while an endpoint has no ready replica (a cold start) before answering 503.
ENDPOINT_TARGET_CONCURRENCY = env_int("ENDPOINT_TARGET_CONCURRENCY", 4)
ENDPOINT_SCALEDOWN_PERIOD_S = env_int("ENDPOINT_SCALEDOWN_PERIOD_S", 300)
ENDPOINT_COLD_START_TIMEOUT_S = env_int("ENDPOINT_COLD_START_TIMEOUT_S", 300)
# The development gateway's in-flight counts and request statistics per endpoint host
# (devstack/gateway); empty: none read (production reads the engines' Prometheus metrics).
ENDPOINT_STATS_URL = env_str("ENDPOINT_STATS_URL", "")
# The VolumeSnapshotClass an endpoint's snapshots use; empty: the cluster's default class.
ENDPOINT_SNAPSHOT_CLASS = env_str("ENDPOINT_SNAPSHOT_CLASS", "")
# The VolumeSnapshotClass of a clone's snapshots of its source's volumes (instances.clones);
# empty: the cluster's default class for INSTANCE_STORAGE_CLASS's driver.
INSTANCE_SNAPSHOT_CLASS = env_str("INSTANCE_SNAPSHOT_CLASS", "")
# Where the KEDA HTTP add-on's interceptor listens: the gateway routes endpoint hosts there.
ENDPOINT_INTERCEPTOR_SERVICE = env_str(
    "ENDPOINT_INTERCEPTOR_SERVICE", "keda/keda-add-ons-http-interceptor-proxy:8080"
)
# The namespaces of the gateway's proxy (Envoy Gateway) and of the KEDA HTTP interceptor: the
# tenant namespaces' policy lets them, and nothing else new, reach endpoint pods' port 8000.
ENDPOINT_GATEWAY_NAMESPACE = env_str("ENDPOINT_GATEWAY_NAMESPACE", "envoy-gateway-system")
ENDPOINT_INTERCEPTOR_NAMESPACE = env_str("ENDPOINT_INTERCEPTOR_NAMESPACE", "keda")
# Engine container images by engine (deploy/images/): the TensorRT-LLM and vLLM servers.
ENDPOINT_IMAGE_TENSORRT_LLM = env_str(
    "ENDPOINT_IMAGE_TENSORRT_LLM", "starverse/tensorrt-llm-serve:0.17-cuda12.8"
)
ENDPOINT_IMAGE_VLLM = env_str("ENDPOINT_IMAGE_VLLM", "starverse/vllm:0.6-cuda12.1")
