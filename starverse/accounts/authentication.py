import json
from typing import Any

from django.db import DEFAULT_DB_ALIAS
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from starverse.accounts.models import ApiToken, Membership, User
from starverse.accounts.services import token_touch
from starverse.accounts.token_cache import (
    CachedToken,
    token_cache_generation,
    token_cache_get,
    token_cache_observe,
    token_cache_put,
)
from starverse.accounts.tokens import token_hash, token_is_well_formed
from starverse.core import logs
from starverse.core.acting import acting_token_set

# Every API request runs this lookup, unless the token authenticated in this process within
# API_TOKEN_CACHE_S (starverse.accounts.token_cache): one raw query (the user with its live
# token's id, name and last use) costs a fraction of building the same join through the ORM.
# A team token's holder must still be a member: the role comes from the same query, and a
# token whose membership is gone is refused like a revoked one.
TOKEN_USER_SQL = (
    f"SELECT u.*, t.id AS token_id, t.team_id AS token_team, t.scopes AS token_scopes, "  # noqa: S608
    f"t.name AS token_name, t.prefix AS token_prefix, t.created_at AS token_created, "
    f"t.last_used_at AS token_last_used, m.role AS token_role, "
    f"t.max_spend_fen AS token_max_spend, t.max_spend_per_day_fen AS token_max_per_day, "
    f"t.expires_at AS token_expires "
    f"FROM {User._meta.db_table} u JOIN {ApiToken._meta.db_table} t ON t.user_id = u.id "
    f"LEFT JOIN {Membership._meta.db_table} m ON m.tenant_id = t.team_id AND m.user_id = u.id "
    "WHERE t.token_hash = %s AND t.revoked_at IS NULL"
)
USER_FIELDS = [field.attname for field in User._meta.concrete_fields]
TOKEN_FIELDS = [field.attname for field in ApiToken._meta.concrete_fields]


def _scopes(raw: Any) -> list[str]:
    value = json.loads(raw) if isinstance(raw, str | bytes) else raw
    return [str(scope) for scope in value or []]


def _lookup(digest: str) -> CachedToken:
    """The token's user and fields from the database; AuthenticationFailed when it is unknown,
    revoked, its user deactivated or its team membership gone."""
    user = next(iter(User.objects.raw(TOKEN_USER_SQL, [digest])), None)
    columns = vars(user) if user is not None else {}
    # the query's token_* columns land on the user as plain attributes
    if user is None or not user.is_active or (columns["token_team"] and not columns["token_role"]):
        raise exceptions.AuthenticationFailed(_("Invalid or revoked token."))
    return CachedToken(
        user_values=tuple(columns[name] for name in USER_FIELDS),
        token_id=columns["token_id"],
        team_id=columns["token_team"],
        scopes=tuple(_scopes(columns["token_scopes"])),
        name=columns["token_name"],
        prefix=columns["token_prefix"],
        created_at=columns["token_created"],
        last_used_at=columns["token_last_used"],
        role=columns["token_role"],
        max_spend_fen=columns["token_max_spend"],
        max_spend_per_day_fen=columns["token_max_per_day"],
        expires_at=columns["token_expires"],
    )


def _looked_up(digest: str) -> CachedToken:
    """_lookup, the result kept in the token cache unless a forget came meanwhile."""
    generation = token_cache_generation()
    found = _lookup(digest)
    token_cache_put(digest, found, generation=generation)
    return found


def _user_and_token(digest: str, found: CachedToken) -> tuple[User, ApiToken]:
    """A User and an ApiToken of this request's own (views may change them: act_for), built
    the way a query's rows are."""
    user = User.from_db(DEFAULT_DB_ALIAS, USER_FIELDS, found.user_values)
    values = {
        "id": found.token_id,
        "user_id": user.pk,
        "team_id": found.team_id,
        "scopes": list(found.scopes),
        "name": found.name,
        "token_hash": digest,
        "prefix": found.prefix,
        "created_at": found.created_at,
        "last_used_at": found.last_used_at,
        "revoked_at": None,
        "max_spend_fen": found.max_spend_fen,
        "max_spend_per_day_fen": found.max_spend_per_day_fen,
        "expires_at": found.expires_at,
    }
    token = ApiToken.from_db(DEFAULT_DB_ALIAS, TOKEN_FIELDS, [values[f] for f in TOKEN_FIELDS])
    token.user = user
    if token.team_id:
        user.act_for(token.team_id, found.role or "")
    return user, token


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer sv_…`. A token that fails its checksum is refused before any
    database lookup; a revoked token or a deactivated user is refused like an unknown one.
    DRF makes one instance per request: it remembers the cache entry it served the request
    from, for revalidate."""

    keyword = "bearer"
    served: tuple[str, CachedToken] | None = None

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
        digest = token_hash(raw)
        found = token_cache_get(digest)
        if found is None:
            found = _looked_up(digest)
        else:
            self.served = (digest, found)
        if found.expires_at is not None and found.expires_at <= timezone.now():
            raise exceptions.AuthenticationFailed(
                _("This token expired on %(when)s: make a new one.")
                % {"when": date_format(timezone.localtime(found.expires_at), "Y-m-d H:i")}
            )
        user, token = _user_and_token(digest, found)
        acting_token_set(token.id)  # what it orders counts against its caps (compute.token_caps)
        token_touch(token=token)
        found.last_used_at = token.last_used_at  # a kept entry writes once a minute too
        logs.set_actor(user)  # the request's log lines name who it is (starverse.core.logs)
        return user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'

    def revalidate(self, request: Request, generation: int) -> bool:
        """With the credentials generation that the throttle's round trip read (before the view
        runs): if the request was served from a cache entry looked up before a credential
        changed, anywhere, the token is looked up again (AuthenticationFailed if it was revoked,
        its user deactivated or its membership removed) and the request's user and token are
        replaced. True when they were."""
        token_cache_observe(generation)
        if self.served is None or self.served[1].generation == token_cache_generation():
            return False
        digest, _stale = self.served
        self.served = None
        user, token = _user_and_token(digest, _looked_up(digest))
        request.user, request.auth = user, token
        logs.set_actor(user)
        return True
