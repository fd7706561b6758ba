"""E-mail verification: the token of the link, and the mail that carries it.

The token is signed (django.core.signing, under SECRET_KEY) and dated; it names the user and a
digest of their address and verification state, so it stops working once the address is
verified (a link works once) or changed, and after EMAIL_VERIFICATION_DAYS."""

import logging
from datetime import timedelta

from django.conf import settings
from django.core import signing
from django.core.mail import send_mail
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.crypto import constant_time_compare, salted_hmac
from django.utils.translation import gettext as _

from starverse.accounts.models import User
from starverse.core.errors import Conflict, InvalidInput
from starverse.core.links import public_url
from starverse.core.money import format_fen

logger = logging.getLogger(__name__)
SALT = "starverse.accounts.email-verification"


class _Signer(signing.TimestampSigner):
    """Dates tokens by django.utils.timezone, the clock the rest of the platform reads."""

    def timestamp(self) -> str:
        return signing.b62_encode(int(timezone.now().timestamp()))


def _state(user: User) -> str:
    return salted_hmac(SALT, f"{user.email}\n{user.email_verified_at}").hexdigest()[:20]


def verification_token(user: User) -> str:
    return _Signer(salt=SALT).sign_object([user.pk, _state(user)])


def already_verified() -> Conflict:
    return Conflict(
        _("Your e-mail address is already verified; this link has been used."),
        code="already_verified",
    )


def verification_user(token: str) -> User:
    """The user a verification token was made for, while it is valid; otherwise an error that
    says what to do: an expired link (ask for a new one), a used one, one that is not ours."""
    invalid = InvalidInput(
        _(
            "This verification link is not valid. Open the link from the newest e-mail, "
            "or send a new one from your dashboard."
        ),
        code="invalid_link",
    )
    max_age = timedelta(days=settings.EMAIL_VERIFICATION_DAYS)
    try:
        user_id, state = _Signer(salt=SALT).unsign_object(token, max_age=max_age)
    except signing.SignatureExpired:
        raise InvalidInput(
            _(
                "This verification link has expired (links are valid for %(days)d days). "
                "Send a new one from your dashboard."
            )
            % {"days": settings.EMAIL_VERIFICATION_DAYS},
            code="link_expired",
        ) from None
    except (signing.BadSignature, ValueError, TypeError):
        raise invalid from None
    user = User.objects.filter(pk=user_id, is_active=True).first()
    if user is None:
        raise invalid
    if user.email_verified_at is not None:
        raise already_verified()
    if not constant_time_compare(state, _state(user)):
        raise invalid  # made for an address the account no longer has
    return user


def verification_email_send(*, user_id: str, language: str) -> bool:
    """Mail a verification link to the user, in `language`; False (nothing sent) when the user
    is gone, inactive or already verified."""
    user = User.objects.filter(pk=user_id, is_active=True).first()
    if user is None or user.email_verified_at is not None:
        return False
    path = reverse("accounts:verify_email", args=[verification_token(user)])
    context = {
        "email": user.email,
        "link": public_url(path),
        "days": settings.EMAIL_VERIFICATION_DAYS,
        "trial": format_fen(settings.TRIAL_CREDIT_FEN)
        if settings.TRIAL_REQUIRES_VERIFICATION and not user.is_staff
        else None,
    }
    with translation.override(language):
        subject = render_to_string("accounts/verify_email_subject.txt", context).strip()
        body = render_to_string("accounts/verify_email_email.txt", context)
    send_mail(subject, body, None, [user.email])
    logger.info("account.verification_sent user=%s", user.id)
    return True
