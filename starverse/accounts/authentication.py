import json
from typing import Any

from django.utils.translation import gettext as _
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from starverse.accounts.models import ApiToken, Membership, User
from starverse.accounts.services import token_touch
from starverse.accounts.tokens import token_hash, token_is_well_formed
from starverse.core import logs
from starverse.core.db import raw_datetime

# Every API request runs this lookup: one raw query (the user with its live token's id, name and
# last use) costs a fraction of building the same join through the ORM each time.
# A team token's holder must still be a member: the role comes from the same query, and a
# token whose membership is gone is refused like a revoked one.
TOKEN_USER_SQL = (
    f"SELECT u.*, t.id AS token_id, t.name AS token_name, t.last_used_at AS token_last_used, "  # noqa: S608
    f"t.team_id AS token_team, t.scopes AS token_scopes, m.role AS token_role "
    f"FROM {User._meta.db_table} u JOIN {ApiToken._meta.db_table} t ON t.user_id = u.id "
    f"LEFT JOIN {Membership._meta.db_table} m ON m.tenant_id = t.team_id AND m.user_id = u.id "
    "WHERE t.token_hash = %s AND t.revoked_at IS NULL"
)


def _scopes(raw: Any) -> list[str]:
    value = json.loads(raw) if isinstance(raw, str | bytes) else raw
    return [str(scope) for scope in value or []]


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
        user = next(iter(User.objects.raw(TOKEN_USER_SQL, [token_hash(raw)])), None)
        columns = vars(user) if user is not None else {}
        # the query's token_* columns land on the user as plain attributes
        if (
            user is None
            or not user.is_active
            or (columns["token_team"] and not columns["token_role"])
        ):
            raise exceptions.AuthenticationFailed(_("Invalid or revoked token."))
        token = ApiToken(
            pk=columns["token_id"],
            user=user,
            team_id=columns["token_team"],
            scopes=_scopes(columns["token_scopes"]),
            name=columns["token_name"],
            last_used_at=raw_datetime(columns["token_last_used"]),
        )
        if token.team_id:
            user.act_for(token.team_id, columns["token_role"])
        token_touch(token=token)
        logs.set_actor(user)  # the request's log lines name who it is (starverse.core.logs)
        return user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'
