"""The console's Content-Security-Policy: its pages run only the platform's own scripts (no
inline script, no other origin), so injected markup cannot run code or send data elsewhere.
They connect only to the console itself and to the web terminal's WebSocket address
(TERMINAL_URL), and their forms post only to the console, whose answer may send the browser on
to the payment page (Stripe Checkout, or the local stand-in at STRIPE_API_BASE): Chromium holds
a form's redirect to `form-action` too, so without it a top-up could not reach the payment. The
admin and the API docs page are Django's and drf-spectacular's own pages and keep their
defaults."""

from collections.abc import Callable
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse

EXEMPT_PREFIXES = ("/admin/", "/api/docs/")
STRIPE_CHECKOUT = "https://checkout.stripe.com"


def checkout_origins() -> list[str]:
    """Where a top-up's form answer sends the browser: Stripe's hosted checkout page, and the
    origin of a Stripe stand-in when the platform talks to one (STRIPE_API_BASE)."""
    origins = [STRIPE_CHECKOUT]
    if settings.STRIPE_API_BASE:
        parts = urlsplit(settings.STRIPE_API_BASE)
        origins.append(f"{parts.scheme}://{parts.netloc}")
    return origins


def policy() -> str:
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            # style attributes (progress bars, admin cells, the terminal's cells) are data, not code
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data:",
            "font-src 'self' data:",
            # the web terminal is its own service, at its own address (docs/user-guide.md
            # "Terminal")
            f"connect-src 'self' {settings.TERMINAL_URL}",
            "object-src 'none'",
            "base-uri 'self'",
            f"form-action 'self' {' '.join(checkout_origins())}",
            "frame-ancestors 'none'",
        ]
    )


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        html = response.get("Content-Type", "").startswith("text/html")
        if html and not request.path.startswith(EXEMPT_PREFIXES):
            response.headers.setdefault("Content-Security-Policy", policy())
        return response
