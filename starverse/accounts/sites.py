"""The admin's site: it has no log-in of its own (the console's, with its lock-out and second
step, serves it), and with REQUIRE_2FA_FOR_STAFF it lets an operator in only on a session that
passed the second factor, whatever path led to it."""

from typing import Any

from django.contrib import admin
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop

from starverse.accounts import loginflow

# Words of Django's own admin templates (5.2) that its zh_Hans catalogue lacks; the project's
# catalogue (LOCALE_PATHS, read before Django's) supplies them.
DJANGO_ADMIN_GAPS = [gettext_noop("Add link"), gettext_noop("Change or view list link")]


class AdminSite(admin.AdminSite):
    site_header = _("Starverse operations")
    site_title = _("Starverse operations")
    index_title = _("Site administration")

    def has_permission(self, request: HttpRequest) -> bool:
        return super().has_permission(request) and loginflow.session_allowed(request)

    def login(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if request.user.is_authenticated and not self.has_permission(request):
            raise PermissionDenied  # signed in, but not as an operator
        target = request.GET.get(REDIRECT_FIELD_NAME, "")
        if not url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            target = reverse("admin:index", current_app=self.name)
        return redirect_to_login(target, reverse("accounts:login"))
