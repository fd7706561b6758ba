"""Production: every secret comes from the environment, DEBUG is refused, cookies are secure."""

from django.core.exceptions import ImproperlyConfigured

from starverse.core.sites import origin_host, origin_of, registrable_domain, same_site
from starverse.env import env_bool, env_int, env_str
from starverse.settings.base import *  # noqa: F403

if DEBUG:  # noqa: F405
    raise ImproperlyConfigured("DEBUG must be off in production (unset DEBUG).")

SECRET_KEY = env_str("SECRET_KEY")
if SECRET_KEY.startswith("dev-only") or len(SECRET_KEY) < 50:
    raise ImproperlyConfigured("SECRET_KEY must be a random value of at least 50 characters.")
env_str("DATABASE_URL")
env_str("REDIS_URL")
env_str("STRIPE_SECRET_KEY")
env_str("STRIPE_WEBHOOK_SECRET")
if STRIPE_DEMO or STRIPE_WEBHOOK_SECRETS == ["whsec_starverse_demo"]:  # noqa: F405
    raise ImproperlyConfigured("Production needs real STRIPE_SECRET_KEY and STRIPE_WEBHOOK_SECRET.")

if not CLUSTER_NODE_CIDR:  # noqa: F405
    raise ImproperlyConfigured(
        "Set CLUSTER_NODE_CIDR: the nodes' addresses, which tenant pods must not reach (their "
        "kubelets); without it tenant egress is open to the nodes (docs/operator-guide.md, "
        "Tenant pods)."
    )

if not GATEWAY_CIDR:  # noqa: F405
    raise ImproperlyConfigured(
        "Set GATEWAY_CIDR (or CLUSTER_NODE_CIDR): where tenant SSH and Jupyter come from."
    )

env_str("GATEWAY_DOMAIN")
if GATEWAY_SCHEME != "https" or GATEWAY_DOMAIN.split(":")[0].endswith("localhost"):  # noqa: F405
    raise ImproperlyConfigured(
        "The instances' gateway must be served over https on a domain of its own: set "
        "GATEWAY_DOMAIN (e.g. gw.example.com, with a wildcard certificate) and leave "
        "GATEWAY_SCHEME unset (docs/operator-guide.md, the HTTPS gateway)."
    )

# Same-site pages send each other's cookies (SameSite): a tenant's page on the gateway could
# then act in the console with a visitor's session.
_console_host = origin_host(origin_of(PUBLIC_BASE_URL))  # noqa: F405
if same_site(_console_host, GATEWAY_DOMAIN):  # noqa: F405
    raise ImproperlyConfigured(
        f"The console ({_console_host}, PUBLIC_BASE_URL) and the gateway ({GATEWAY_DOMAIN}, "  # noqa: F405
        f"GATEWAY_DOMAIN) are one site ({registrable_domain(_console_host)}): tenants' pages on "
        "the gateway would be same-site with the console. Give the gateway a registrable domain "
        "of its own, e.g. gw.example-usercontent.com for console.example.com "
        "(docs/operator-guide.md, the HTTPS gateway)."
    )

if PUBLIC_POOL_SOURCE.startswith("hostpath://") and not PUBLIC_POOL_ALLOW_HOSTPATH:  # noqa: F405
    raise ImproperlyConfigured(
        "PUBLIC_POOL_SOURCE is a hostPath, which tenant pods may not mount in production (Pod "
        "Security baseline forbids it, and a node directory is not shared): set "
        "PUBLIC_POOL_SOURCE=nfs://server/export or pvc://claim (docs/operator-guide.md, the "
        "public pool), or "
        "PUBLIC_POOL_ALLOW_HOSTPATH=1 for a single-node test cluster."
    )

# One JSON object per log line for the cluster's log collector (LOG_FORMAT=text for people).
LOGGING = logging_config(env_str("LOG_FORMAT", "json"))  # noqa: F405

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
# The gateway's proxy asks its authorization check over the cluster network, in plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^gateway/auth(/|$)"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
