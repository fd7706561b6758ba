"""The console's Content-Security-Policy: its pages run only the platform's own scripts (no
inline script, no other origin), so injected markup cannot run code or send data elsewhere.
They connect only to the console itself and to the web terminal's WebSocket address
(TERMINAL_URL). The admin and the API docs page are Django's and drf-spectacular's own pages and
keep their defaults."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

EXEMPT_PREFIXES = ("/admin/", "/api/docs/")


def policy() -> str:
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            # style attributes (progress bars, admin cells, the terminal's cells) are data, not code
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data:",
            "font-src 'self' data:",
            # the web terminal is its own service, at its own address (README "Terminal")
            f"connect-src 'self' {settings.TERMINAL_URL}",
            "object-src 'none'",
            "base-uri 'self'",
            "form-action 'self'",
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
