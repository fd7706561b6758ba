"""Writes for two-factor authentication: enrolling an authenticator app, checking a second
factor at log-in, recovery codes, switching it off, and an operator's reset for a lost phone.
Also the API's token log-in, which applies the console's log-in rules (lock-out, second
factor) to scripts."""

import logging
from dataclasses import dataclass

from django.contrib.admin.models import CHANGE, LogEntry
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext as _

from starverse.accounts import lockout, totp
from starverse.accounts.models import ApiToken, RecoveryCode, TotpDevice, User
from starverse.accounts.selectors import two_factor_enabled, two_factor_required_for_login
from starverse.accounts.services import (
    login_check,
    sessions_revoke,
    token_create,
    two_factor_needed_message,
)
from starverse.core.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    TooManyAttempts,
    Unauthenticated,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Enrolment:
    """An authenticator app being set up: what to scan or type into it."""

    secret: str
    uri: str

    @property
    def secret_for_typing(self) -> str:
        return totp.secret_for_typing(self.secret)

    @property
    def qr_svg(self) -> str:
        return totp.qr_svg(self.uri)


def totp_begin(*, user: User) -> Enrolment:
    """Start setting up an authenticator app (again): a new secret, not yet a factor. Refused
    while one is confirmed, so a signed-in session cannot swap the factor without switching
    it off first (which takes the password and a code)."""
    secret = totp.secret_generate()
    with transaction.atomic():
        device = TotpDevice.objects.select_for_update().filter(user=user).first()
        if device is not None and device.confirmed_at is not None:
            raise Conflict(
                _("Two-factor authentication is already on: turn it off first for another app."),
                code="2fa_already_on",
            )
        TotpDevice.objects.update_or_create(
            user=user,
            defaults={
                "secret": secret,
                "created_at": timezone.now(),
                "confirmed_at": None,
                "last_used_step": None,
            },
        )
    logger.info("2fa.enrolment_started user=%s", user.id)
    return Enrolment(secret, totp.otpauth_uri(secret, user.email))


def totp_enrolment(*, user: User) -> Enrolment | None:
    """The set-up in progress (its secret is shown until it is confirmed, never after)."""
    device = TotpDevice.objects.filter(user=user, confirmed_at__isnull=True).first()
    if device is None:
        return None
    return Enrolment(device.secret, totp.otpauth_uri(device.secret, user.email))


def _recovery_codes_replace(user: User) -> list[str]:
    """A new set of recovery codes in place of every earlier one; the plaintexts, shown once."""
    codes = [totp.recovery_code_generate() for _n in range(totp.RECOVERY_CODE_COUNT)]
    RecoveryCode.objects.filter(user=user).delete()
    RecoveryCode.objects.bulk_create(
        [RecoveryCode(user=user, code_hash=totp.recovery_code_hash(code)) for code in codes]
    )
    return codes


def totp_confirm(*, user: User, code: str) -> list[str]:
    """Finish the set-up with a code the app made: from now on log-ins ask for a code. Returns
    the ten recovery codes, which are shown this once."""
    with transaction.atomic():
        device = (
            TotpDevice.objects.select_for_update()
            .filter(user=user, confirmed_at__isnull=True)
            .first()
        )
        if device is None:
            raise Conflict(
                _("There is no set-up in progress: start it again on the Security page."),
                code="2fa_not_started",
            )
        step = totp.totp_step_of(device.secret, code)
        if step is None:
            raise InvalidInput(
                _(
                    "That code is not right. Enter the 6-digit code your app shows now; if it "
                    "is still refused, check that the phone's clock is set automatically."
                ),
                code="otp_invalid",
            )
        device.confirmed_at = timezone.now()
        device.last_used_step = step
        device.save(update_fields=["confirmed_at", "last_used_step"])
        codes = _recovery_codes_replace(user)
    logger.info("2fa.enabled user=%s", user.id)
    return codes


def _refuse_if_locked_out(request: HttpRequest, user: User) -> None:
    refusal = lockout.login_refusal(request, user.email)
    if refusal:
        raise TooManyAttempts(refusal)


def totp_verify(*, request: HttpRequest, user: User, code: str) -> str:
    """Check a second factor: a 6-digit code of the user's app, of a later time step than the
    last one accepted (so a code that was seen cannot be replayed), or an unused recovery
    code, which is spent. Refused while the account or the client address is locked out, and
    a wrong code counts as a failed log-in for both. Returns "totp" or "recovery"."""
    _refuse_if_locked_out(request, user)
    with transaction.atomic():
        device = (
            TotpDevice.objects.select_for_update()
            .filter(user=user, confirmed_at__isnull=False)
            .first()
        )
        if device is not None and totp.looks_like_totp(code):
            step = totp.totp_step_of(device.secret, code)
            if step is not None and (device.last_used_step is None or step > device.last_used_step):
                device.last_used_step = step
                device.save(update_fields=["last_used_step"])
                return "totp"
        elif device is not None:
            spent = RecoveryCode.objects.filter(
                user=user, code_hash=totp.recovery_code_hash(code), used_at__isnull=True
            ).update(used_at=timezone.now())
            if spent:
                logger.info("2fa.recovery_code_used user=%s", user.id)
                return "recovery"
    lockout.login_failed(request, user.email)
    logger.info("2fa.failed user=%s", user.id)
    raise Unauthenticated(
        _(
            "That code is not right or was already used. Enter the current 6-digit code from "
            "your authenticator app, or one of your unused recovery codes."
        ),
        code="otp_invalid",
    )


def recovery_codes_regenerate(*, request: HttpRequest, user: User, code: str) -> list[str]:
    """A new set of ten recovery codes, after a second factor; every earlier code stops
    working. The plaintexts are shown this once."""
    if not two_factor_enabled(user):
        raise Conflict(_("Two-factor authentication is off."), code="2fa_off")
    totp_verify(request=request, user=user, code=code)
    with transaction.atomic():
        codes = _recovery_codes_replace(user)
    logger.info("2fa.recovery_codes_regenerated user=%s", user.id)
    return codes


def _remove(user: User) -> bool:
    with transaction.atomic():
        RecoveryCode.objects.filter(user=user).delete()
        deleted, _by_model = TotpDevice.objects.filter(user=user).delete()
    return bool(deleted)


def totp_disable(*, request: HttpRequest, user: User, password: str, code: str) -> None:
    """Switch two-factor authentication off, with the password and a second factor (a
    session left open somewhere is not enough). Operators cannot while REQUIRE_2FA_FOR_STAFF
    is on."""
    if two_factor_required_for_login(user):
        raise Forbidden(
            _("Operators must keep two-factor authentication on."), code="2fa_required_for_staff"
        )
    _refuse_if_locked_out(request, user)
    if not user.check_password(password):
        lockout.login_failed(request, user.email)
        raise InvalidInput(_("That is not your password."), code="wrong_password")
    totp_verify(request=request, user=user, code=code)
    _remove(user)
    logger.info("2fa.disabled user=%s", user.id)


def totp_reset(*, user: User, operator: User, reason: str) -> bool:
    """An operator's reset for someone who lost their authenticator and recovery codes (after
    checking who they are): the app and the codes are removed and every session of theirs
    ends, so the next log-in is with the password alone (operators are then sent to set it up
    again). Recorded in the admin's history of the user and in the log. False if they had none."""
    reason = reason.strip()
    if not reason:
        raise InvalidInput(_("Give the reason for the reset."), code="reason_required")
    if not operator.is_staff or not operator.is_active:
        raise Forbidden(_("Only an active operator can reset two-factor authentication."))
    removed = _remove(user)
    sessions = sessions_revoke(user=user)
    LogEntry.objects.log_actions(
        user_id=operator.pk,
        queryset=[user],
        action_flag=CHANGE,
        change_message=f"Two-factor authentication reset: {reason}",
        single_object=True,
    )
    logger.warning(
        "2fa.reset user=%s operator=%s had_device=%s sessions_revoked=%s",
        user.id,
        operator.id,
        removed,
        sessions,
    )
    return removed


def token_login(
    *,
    request: HttpRequest,
    email: str,
    password: str,
    otp: str | None,
    name: str,
    team_id: str | None = None,
    scopes: list[str] | None = None,
) -> tuple[ApiToken, str]:
    """A new API token for the e-mail and password (`POST /auth/token`), under the console's
    rules: refused while the account or the address is locked out; a wrong password or code
    counts as a failed log-in; an account with two-factor authentication must send a code
    (`otp`); an operator without it gets no token while REQUIRE_2FA_FOR_STAFF is on. The
    token acts for `team_id` with `scopes` as token_create's."""
    refusal = lockout.login_refusal(request, email)
    if refusal:
        raise TooManyAttempts(refusal)
    user = login_check(email=email, password=password)
    if user is None:
        lockout.login_failed(request, email)
        raise Unauthenticated(_("Wrong e-mail address or password."))
    if two_factor_enabled(user):
        if not otp:
            raise Unauthenticated(
                _(
                    "This account has two-factor authentication: send the 6-digit code from "
                    "your authenticator app (or a recovery code) as otp."
                ),
                code="otp_required",
            )
        totp_verify(request=request, user=user, code=otp)
    elif two_factor_required_for_login(user):
        raise Forbidden(two_factor_needed_message(), code="2fa_required")
    lockout.login_succeeded(user.email)
    return token_create(user=user, name=name, team_id=team_id, scopes=scopes)
