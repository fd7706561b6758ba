from collections.abc import Sequence
from datetime import datetime, time
from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm, SetPasswordForm
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from starverse.accounts import lockout
from starverse.accounts.models import (
    IDLE_MINUTES_RANGE,
    IDLE_UTIL_PCT_RANGE,
    IDLE_WARN_MINUTES_RANGE,
    Scope,
    all_scopes,
)
from starverse.accounts.services import TokenCaps
from starverse.core.money import MoneyParseError, parse_fen


class SignupForm(forms.Form):
    email = forms.EmailField(label=_("E-mail"), max_length=254)
    password = forms.CharField(
        label=_("Password"),
        max_length=128,
        strip=False,
        widget=forms.PasswordInput,
        help_text=_("At least 10 characters, not only digits, not a common password."),
    )


class LockoutMixin:
    """Refuses a log-in while the account or the client address has too many recent failures
    (before the password is checked) and counts each failure. The account's count is cleared
    when the log-in completes, after the second step where there is one (loginflow.complete),
    so a known password does not reset the count of wrong codes."""

    request: Any
    locked_out = False

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = self.cleaned_data  # type: ignore[attr-defined]
        email = data.get("username") or ""
        if self.request is not None and email:
            refusal = lockout.login_refusal(self.request, email)
            if refusal:
                self.locked_out = True
                raise ValidationError(refusal, code="locked_out")
        try:
            cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]
        except ValidationError:
            if self.request is not None and email:
                lockout.login_failed(self.request, email)
            raise
        return cleaned


class LoginForm(LockoutMixin, AuthenticationForm):
    username = forms.CharField(label=_("E-mail"), max_length=254)


class OtpForm(forms.Form):
    code = forms.CharField(
        label=_("Code"),
        max_length=32,
        help_text=_("The 6-digit code from your authenticator app, or a recovery code."),
    )


class TotpConfirmForm(forms.Form):
    code = forms.CharField(
        label=_("Code from the app"),
        max_length=32,
        help_text=_("The 6-digit code the app shows after adding Starverse."),
    )


class TotpDisableForm(forms.Form):
    password = forms.CharField(
        label=_("Password"), max_length=128, strip=False, widget=forms.PasswordInput
    )
    code = forms.CharField(
        label=_("Code"),
        max_length=32,
        help_text=_("The 6-digit code from your authenticator app, or a recovery code."),
    )


PERSONAL = "personal"  # the team choice of the person's own account


class TokenCapsForm(forms.Form):
    """A token's spending caps (typed in yuan) and expiry day; empty: none."""

    max_spend = forms.CharField(label=_("Spending cap (¥)"), required=False, max_length=20)
    max_spend_per_day = forms.CharField(
        label=_("Spending cap a day (¥)"), required=False, max_length=20
    )
    expires_at = forms.DateField(
        label=_("Expires on"), required=False, widget=forms.DateInput(attrs={"type": "date"})
    )

    def clean_max_spend(self) -> int | None:
        return _cap_fen(self.cleaned_data["max_spend"])

    def clean_max_spend_per_day(self) -> int | None:
        return _cap_fen(self.cleaned_data["max_spend_per_day"])

    def caps(self) -> TokenCaps:
        """The caps typed, for token_create (an expiry at the start of its day, local time)."""
        day = self.cleaned_data.get("expires_at")
        expires = None
        if day is not None:
            expires = timezone.make_aware(datetime.combine(day, time.min))
        return TokenCaps(
            max_spend_fen=self.cleaned_data.get("max_spend"),
            max_spend_per_day_fen=self.cleaned_data.get("max_spend_per_day"),
            expires_at=expires,
        )


class TokenForm(TokenCapsForm):
    """A new API token: its name, the account it acts for (the person's own, or one of their
    teams: `teams` as (id, name) pairs), its scopes (all four by default) and its caps."""

    name = forms.CharField(label=_("Name"), max_length=100)
    team = forms.ChoiceField(label=_("Acts for"))
    scopes = forms.MultipleChoiceField(
        label=_("Scopes"),
        choices=Scope.choices,
        initial=all_scopes,
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": _("Choose at least one scope.")},
    )

    def __init__(self, *args: Any, teams: Sequence[tuple[str, str]] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [(PERSONAL, _("Personal account")), *teams]
        self.fields["team"].choices = choices  # type: ignore[attr-defined]


def _cap_fen(text: str) -> int | None:
    """A cap typed in yuan, in fen; None when left empty."""
    if not text.strip():
        return None
    try:
        fen = parse_fen(text)
    except MoneyParseError as error:
        raise forms.ValidationError(str(error)) from None
    if fen < 0:
        raise forms.ValidationError(_("A cap cannot be negative."))
    return fen


class SshKeyForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100, required=False)
    public_key = forms.CharField(
        label=_("Public key"), max_length=16384, widget=forms.Textarea(attrs={"rows": 4})
    )


class ResetPasswordForm(SetPasswordForm):
    revoke_tokens = forms.BooleanField(
        label=_("Also revoke all my API tokens"),
        required=False,
        initial=True,
        help_text=_("Recommended if someone else may know your password or a token."),
    )


class SettingsForm(forms.Form):
    """The defaults of a user's orders: the idle auto-stop."""

    idle_stop_enabled = forms.BooleanField(
        required=False, label=_("Stop new instances by themselves when they sit idle")
    )
    idle_stop_util_pct = forms.IntegerField(
        label=_("Idle below (% GPU utilisation)"),
        min_value=IDLE_UTIL_PCT_RANGE[0],
        max_value=IDLE_UTIL_PCT_RANGE[1],
    )
    idle_stop_minutes = forms.IntegerField(
        label=_("Stop after (minutes idle)"),
        min_value=IDLE_MINUTES_RANGE[0],
        max_value=IDLE_MINUTES_RANGE[1],
    )
    idle_warn_minutes = forms.IntegerField(
        label=_("Warn me (minutes before the stop)"),
        min_value=IDLE_WARN_MINUTES_RANGE[0],
        max_value=IDLE_WARN_MINUTES_RANGE[1],
    )
