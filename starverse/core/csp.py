"""The console's Content-Security-Policy: its pages run only the platform's own scripts (no
inline script, no other origin), so injected markup cannot run code or send data elsewhere.
The admin and the API docs page are Django's and drf-spectacular's own pages and keep their
defaults."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        # style attributes (progress bars, admin cells) are data, not code
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
EXEMPT_PREFIXES = ("/admin/", "/api/docs/")


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        html = response.get("Content-Type", "").startswith("text/html")
        if html and not request.path.startswith(EXEMPT_PREFIXES):
            response.headers.setdefault("Content-Security-Policy", POLICY)
        return response
