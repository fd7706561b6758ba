from typing import Any

from django.utils.translation import gettext as _
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from starverse.accounts.models import ApiToken
from starverse.accounts.services import token_touch
from starverse.accounts.tokens import token_hash, token_is_well_formed


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer sv_…`. A token that fails its checksum is refused before any
    database lookup; a revoked token or a deactivated user is refused like an unknown one."""

    keyword = "bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() != self.keyword:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                _("Send the header as: Authorization: Bearer sv_…")
            )
        raw = header[1]
        if not token_is_well_formed(raw):
            raise exceptions.AuthenticationFailed(
                _("Invalid token: check that it was copied whole.")
            )
        token = (
            ApiToken.objects.select_related("user")
            .filter(token_hash=token_hash(raw), revoked_at__isnull=True)
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("Invalid or revoked token."))
        token_touch(token=token)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'
