"""Reads about accounts that more than one caller needs."""

from django.conf import settings

from starverse.accounts.models import RecoveryCode, TotpDevice, User, UserSettings
from starverse.core.db import first_row


def totp_device_confirmed(user: User) -> TotpDevice | None:
    """The user's authenticator, if its enrolment was confirmed (only then is it a factor)."""
    return TotpDevice.objects.filter(user=user, confirmed_at__isnull=False).first()


def two_factor_enabled(user: User) -> bool:
    return TotpDevice.objects.filter(user=user, confirmed_at__isnull=False).exists()


def two_factor_required_for_login(user: User) -> bool:
    """Operators cannot use the console, the admin or a token log-in without a second factor
    (REQUIRE_2FA_FOR_STAFF)."""
    return bool(user.is_staff and settings.REQUIRE_2FA_FOR_STAFF)


def recovery_codes_left(user: User) -> int:
    return RecoveryCode.objects.filter(user=user, used_at__isnull=True).count()


def user_settings(user: User) -> UserSettings:
    """The user's settings: their row, or the defaults (unsaved) when they never changed any."""
    # a plain query: every order reads it
    return first_row(UserSettings, "user_id = %s", [user.pk]) or UserSettings(user_id=user.pk)
