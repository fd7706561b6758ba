"""Writes for accounts: people and their tenants, their addresses' verification, API tokens and
SSH keys. Opening an account with its wallet, and the trial credit that a verified address
earns, are billing.onboarding's, which calls user_create and user_email_mark_verified here."""

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from starverse.accounts.access import access_changed
from starverse.accounts.audit import audit_record
from starverse.accounts.canonical import canonical_email
from starverse.accounts.models import (
    IDLE_MINUTES_RANGE,
    IDLE_UTIL_PCT_RANGE,
    IDLE_WARN_MINUTES_RANGE,
    ApiToken,
    SshKey,
    Tenant,
    User,
    UserSettings,
    normalize_email,
)
from starverse.accounts.selectors import two_factor_enabled
from starverse.accounts.signals import ssh_keys_changed
from starverse.accounts.sshkeys import parse_public_key
from starverse.accounts.teams import token_team_check
from starverse.accounts.token_cache import token_cache_forget
from starverse.accounts.tokens import token_display_prefix, token_generate, token_hash
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, Forbidden, InvalidInput
from starverse.core.links import public_url

logger = logging.getLogger(__name__)
MAX_PASSWORD_LENGTH = 128
MAX_TOKENS_PER_USER = 50
MAX_KEYS_PER_USER = 50
VERIFICATION_MAIL_TASK = "starverse.accounts.tasks.send_verification_email"


def email_clean(email: str) -> tuple[str, str]:
    """The normalised address and its canonical form, or InvalidInput."""
    email = normalize_email(email)
    try:
        EmailValidator()(email)
        return email, canonical_email(email)
    except (ValidationError, ValueError):
        raise InvalidInput(_("Enter a valid e-mail address."), code="invalid_email") from None


def _check_password(password: str, email: str) -> None:
    if len(password) > MAX_PASSWORD_LENGTH:
        raise InvalidInput(
            _("Passwords are at most %(n)d characters.") % {"n": MAX_PASSWORD_LENGTH},
            code="weak_password",
        )
    try:
        validate_password(password, user=User(email=email))
    except ValidationError as error:
        raise InvalidInput(" ".join(error.messages), code="weak_password") from None


def user_create(*, email: str, password: str, ip: str | None, is_staff: bool) -> User:
    """A person (or an operator) and their own tenant, with the address and password checked.
    The normalised e-mail is unique, so of concurrent creations of one address one wins and
    the others get a Conflict. The address is not verified yet. The wallet is billing's
    (billing.onboarding)."""
    email, canonical = email_clean(email)
    _check_password(password, email)
    try:
        with transaction.atomic():
            tenant = Tenant.objects.create(name=email)
            user = User(
                email=email,
                canonical_email=canonical,
                tenant=tenant,
                signup_ip=ip,
                is_staff=is_staff,
                is_superuser=is_staff,
            )
            user.set_password(password)
            user.save()
    except IntegrityError:
        if User.objects.filter(email=email).exists():
            raise Conflict(
                _("An account with this e-mail address already exists. Log in instead."),
                code="email_taken",
            ) from None
        raise
    logger.info("account.created user=%s tenant=%s staff=%s", user.id, tenant.id, is_staff)
    return user


def user_email_change(*, user: User, email: str) -> User:
    """An operator's correction of an account's address: normalised and checked as at sign-up,
    with its canonical form. Whether it is verified stays as it was: the trial follows the first
    verification only, so a changed address earns no second one."""
    email, canonical = email_clean(email)
    try:
        with transaction.atomic():
            User.objects.filter(pk=user.pk).update(email=email, canonical_email=canonical)
            token_cache_forget()
    except IntegrityError:
        raise Conflict(
            _("An account with this e-mail address already exists."), code="email_taken"
        ) from None
    user.email, user.canonical_email = email, canonical
    logger.info("account.email_changed user=%s", user.id)
    return user


def email_verification_send(*, user: User, language: str | None = None) -> None:
    """Mail the user a link that verifies their address, in `language` (the active one by
    default). A worker sends it after commit, so a slow mail server holds up no request."""
    if user.email_verified_at is not None:
        raise Conflict(_("Your e-mail address is already verified."), code="already_verified")
    language = language or translation.get_language() or settings.LANGUAGE_CODE
    enqueue_on_commit(VERIFICATION_MAIL_TASK, user.id, language)
    logger.info("account.verification_requested user=%s", user.id)


def user_email_mark_verified(*, user: User) -> bool:
    """Mark the address verified, once: True for the call that did it, False when it already
    was. A conditional update decides between concurrent calls (the second waits for the
    first's row lock, then finds nothing left to update)."""
    now = timezone.now()
    done = User.objects.filter(pk=user.pk, email_verified_at__isnull=True).update(
        email_verified_at=now
    )
    if done:
        token_cache_forget()
        user.email_verified_at = now
        logger.info("account.email_verified user=%s", user.id)
    return bool(done)


def two_factor_needed_message() -> str:
    url = public_url(reverse("accounts:security"))
    return _(
        "Turn on two-factor authentication first, on the Security page of the console: %(url)s"
    ) % {"url": url}


@dataclass(frozen=True)
class TokenCaps:
    """A new token's spending caps (fen; None: none) and expiry (None: never)."""

    max_spend_fen: int | None = None
    max_spend_per_day_fen: int | None = None
    expires_at: datetime | None = None


def token_caps_check(caps: TokenCaps, minted_by: ApiToken | None) -> TokenCaps:
    """The caps a new token gets: an expiry in the future; and, made with a token that has a
    cap or an expiry, never more than that token's (a capped agent cannot mint itself an
    uncapped token): a cap it leaves out is the minter's, a higher one is refused (403
    `token_cap`), as is a later expiry."""
    if caps.expires_at is not None and caps.expires_at <= timezone.now():
        raise InvalidInput(_("expires_at: give a moment in the future."), field="expires_at")
    if minted_by is None:
        return caps
    fields = {}
    for name in ("max_spend_fen", "max_spend_per_day_fen", "expires_at"):
        own, theirs = getattr(caps, name), getattr(minted_by, name)
        if theirs is not None and own is not None and own > theirs:
            raise Forbidden(
                _("%(field)s: a token made with this token may not go past its own.")
                % {"field": name},
                code="token_cap",
            )
        fields[name] = theirs if own is None else own
    return TokenCaps(**fields)


def token_create(
    *,
    user: User,
    name: str,
    at_signup: bool = False,
    team_id: str | None = None,
    scopes: list[str] | None = None,
    ip: str | None = None,
    minted_by: ApiToken | None = None,
    caps: TokenCaps | None = None,
) -> tuple[ApiToken, str]:
    """A new API token; the plaintext is returned once and never stored. With
    REQUIRE_2FA_FOR_API_TOKENS only an account with two-factor authentication gets one, so a
    stolen password cannot be turned into a credential that skips the second factor. The
    sign-up token is exempt: it is the new account's first credential, made before a second
    factor can exist, and goes to whoever just chose the password. A token acts for the
    person's own account, or for `team_id` (the team's id, or its exact name among the
    person's teams) when they are its member (and dies with the membership); its scopes are
    all four unless named. Made with a token (`minted_by`), it is never broader than that
    token (accounts.teams.token_team_check). `caps`: its spending caps and expiry
    (compute.token_caps); made with a capped or expiring token, it is capped and expires no
    later than that one (token_caps_check)."""
    if settings.REQUIRE_2FA_FOR_API_TOKENS and not at_signup and not two_factor_enabled(user):
        raise Forbidden(two_factor_needed_message(), code="2fa_required")
    name = name.strip() or _("API token")
    if ApiToken.objects.filter(user=user, revoked_at__isnull=True).count() >= MAX_TOKENS_PER_USER:
        raise Conflict(_("You have %(n)d tokens; revoke one first.") % {"n": MAX_TOKENS_PER_USER})
    team_id, scopes = token_team_check(
        user=user, team_id=team_id, scopes=scopes or [], minted_by=minted_by
    )
    caps = token_caps_check(caps or TokenCaps(), minted_by)
    plaintext = token_generate()
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            team_id=team_id or None,
            scopes=scopes,
            name=name[:100],
            token_hash=token_hash(plaintext),
            prefix=token_display_prefix(plaintext),
            max_spend_fen=caps.max_spend_fen,
            max_spend_per_day_fen=caps.max_spend_per_day_fen,
            expires_at=caps.expires_at,
        )
        audit_record(
            tenant_id=team_id or user.personal_tenant_id,
            actor=user,
            action="token.created",
            obj=token,
            data={"name": token.name, "scopes": scopes},
            ip=ip,
        )
    logger.info("token.created user=%s token=%s team=%s", user.id, token.id, team_id)
    return token, plaintext


CAP_FIELDS = ("max_spend_fen", "max_spend_per_day_fen", "expires_at")


def _raises(old: Any, new: Any) -> bool:
    """Whether a cap (or an expiry) goes from `old` to something looser: none at all, or more."""
    return old is not None and (new is None or new > old)


def _token_capped(token: ApiToken) -> bool:
    return any(getattr(token, name) is not None for name in CAP_FIELDS)


def token_caps_change(
    *,
    token: ApiToken,
    changes: dict[str, Any],
    actor: User,
    acting: ApiToken | None = None,
    ip: str | None = None,
) -> ApiToken:
    """Change a token's caps and expiry (`changes`: any of CAP_FIELDS; None lifts one), lower or
    higher, by its owner: through a session or an uncapped token, anything; through a token with
    a cap or an expiry (`acting`), only tighter, never past that token's own (403 `token_cap`),
    so a capped agent cannot raise its own cap nor another's. Audited with both values."""
    changes = {name: value for name, value in changes.items() if name in CAP_FIELDS}
    expires_at = changes.get("expires_at")
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidInput(_("expires_at: give a moment in the future."), field="expires_at")
    if acting is not None and _token_capped(acting):
        for name, value in changes.items():
            old = getattr(token, name)
            if value != old and (_raises(old, value) or _raises(getattr(acting, name), value)):
                raise Forbidden(
                    _(
                        "%(field)s: a token with a cap or an expiry can only tighten caps. "
                        "Raise it from the console, or with a token that has no cap."
                    )
                    % {"field": name},
                    code="token_cap",
                )
    with transaction.atomic():
        locked = ApiToken.objects.select_for_update().get(pk=token.pk, revoked_at__isnull=True)
        before = {name: getattr(locked, name) for name in changes}
        for name, value in changes.items():
            setattr(locked, name, value)
        locked.save(update_fields=list(changes))
        token_cache_forget()
        audit_record(
            tenant_id=locked.team_id or locked.user.personal_tenant_id,
            actor=actor,
            action="token.caps_changed",
            obj=locked,
            data={
                "name": locked.name,
                "before": {name: _plain(value) for name, value in before.items()},
                "after": {name: _plain(value) for name, value in changes.items()},
            },
            ip=ip,
        )
    logger.info("token.caps_changed user=%s token=%s fields=%s", actor.id, token.id, list(changes))
    return locked


def _plain(value: Any) -> Any:
    """A cap or an expiry as the audit log's JSON keeps it."""
    return value.isoformat() if isinstance(value, datetime) else value


def token_revoke(*, token: ApiToken, actor: Any = None, ip: str | None = None) -> None:
    with transaction.atomic():
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        token_cache_forget()
        audit_record(
            tenant_id=token.team_id or token.user.personal_tenant_id,
            actor=actor or token.user,
            action="token.revoked",
            obj=token,
            data={"name": token.name},
            ip=ip,
        )
    logger.info("token.revoked user=%s token=%s", token.user_id, token.id)


def token_touch(*, token: ApiToken) -> None:
    """Record use, at most once a minute, so authentication does not write on every request."""
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now


def ssh_key_add(*, user: User, name: str, public_key: str) -> SshKey:
    parsed = parse_public_key(public_key)
    if SshKey.objects.filter(user=user).count() >= MAX_KEYS_PER_USER:
        raise Conflict(_("You have %(n)d SSH keys; delete one first.") % {"n": MAX_KEYS_PER_USER})
    name = name.strip() or parsed.comment or parsed.key_type
    try:
        with transaction.atomic():
            key = SshKey.objects.create(
                user=user,
                name=name[:100],
                key_type=parsed.key_type,
                public_key=parsed.canonical,
                fingerprint=parsed.fingerprint,
                bits=parsed.bits,
            )
            # running instances that take every key of the tenant get this one too
            ssh_keys_changed.send(sender=SshKey, tenant_id=user.personal_tenant_id)
    except IntegrityError:
        raise Conflict(
            _("This key is already added (%(fp)s).") % {"fp": parsed.fingerprint},
            code="duplicate_key",
        ) from None
    logger.info("sshkey.added user=%s key=%s fingerprint=%s", user.id, key.id, key.fingerprint)
    return key


def ssh_key_delete(*, key: SshKey) -> None:
    """Delete a key; the tenant's running instances stop accepting it within a minute (their
    access Secrets are rendered again after commit)."""
    tenant_id = key.user.personal_tenant_id
    with transaction.atomic():
        key.delete()
        ssh_keys_changed.send(sender=SshKey, tenant_id=tenant_id)
    logger.info("sshkey.deleted user=%s key=%s", key.user_id, key.pk)


def login_check(*, email: str, password: str) -> User | None:
    """The user for these credentials, or None; runs the hasher either way (no timing oracle)."""
    found = authenticate(email=normalize_email(email), password=password)
    return found if isinstance(found, User) and found.is_active else None


def sessions_revoke(*, user: User) -> int:
    """Delete every stored session signed in as this user; the number deleted. (A changed
    password already makes Django refuse them; deleting them ends them for certain.)"""
    from django.contrib.auth import SESSION_KEY
    from django.contrib.sessions.models import Session

    stale = [
        session.pk
        for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator()
        if session.get_decoded().get(SESSION_KEY) == str(user.pk)
    ]
    Session.objects.filter(pk__in=stale).delete()
    access_changed(user.pk)  # and the terminal sessions opened with them end
    return len(stale)


def user_password_set(*, user: User, password: str, revoke_tokens: bool) -> User:
    """A new password (already validated by the form): every session of the user ends and,
    when asked, every API token of theirs is revoked, so a leaked credential stops working."""
    with transaction.atomic():
        user.set_password(password)
        user.save(update_fields=["password"])
        revoked = 0
        if revoke_tokens:
            revoked = ApiToken.objects.filter(user=user, revoked_at__isnull=True).update(
                revoked_at=timezone.now()
            )
            token_cache_forget()
        sessions = sessions_revoke(user=user)
    logger.info(
        "account.password_set user=%s sessions_revoked=%s tokens_revoked=%s",
        user.id,
        sessions,
        revoked,
    )
    return user


def bounded_int(field: str, value: Any, bounds: tuple[int, int]) -> int:
    """`value` as a whole number within `bounds`, or InvalidInput naming `field`."""
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(
            _("%(field)s: must be a whole number from %(low)d to %(high)d.")
            % {"field": field, "low": low, "high": high},
            code="invalid",
        )
    return value


SETTINGS_BOUNDS = {
    "idle_stop_util_pct": IDLE_UTIL_PCT_RANGE,
    "idle_stop_minutes": IDLE_MINUTES_RANGE,
    "idle_warn_minutes": IDLE_WARN_MINUTES_RANGE,
}


def user_settings_update(*, user: User, **changes: Any) -> UserSettings:
    """Change some of a user's settings (the defaults of their orders); each value is checked
    against its bounds and a refusal names the field and changes nothing."""
    for name, value in changes.items():
        if name == "idle_stop_enabled":
            if not isinstance(value, bool):
                raise InvalidInput(
                    _("%(field)s: must be true or false.") % {"field": name}, code="invalid"
                )
        elif name in SETTINGS_BOUNDS:
            bounded_int(name, value, SETTINGS_BOUNDS[name])
        else:
            raise InvalidInput(_("%(field)s: unknown setting.") % {"field": name}, code="invalid")
    with transaction.atomic():
        UserSettings.objects.get_or_create(user_id=user.pk)
        row = UserSettings.objects.select_for_update().get(user_id=user.pk)
        for name, value in changes.items():
            setattr(row, name, value)
        row.save()
    logger.info("account.settings user=%s fields=%s", user.pk, ",".join(sorted(changes)))
    return row
