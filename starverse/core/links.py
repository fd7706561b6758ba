"""Links to the console in what leaves it (e-mails, Stripe's return pages, an instance's
environment, the gateway's sign-in hop), all built here from PUBLIC_BASE_URL: never from the
Host a request came with, which the client chooses (a reset link built from `Host: <an
instance's address>` once mailed a victim's reset token to a page a tenant serves)."""

from django.conf import settings


def public_url(path: str = "") -> str:
    """The console's address (PUBLIC_BASE_URL, without a trailing `/`) followed by `path`, an
    absolute path such as reverse() gives."""
    return str(settings.PUBLIC_BASE_URL).rstrip("/") + path
