from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm, SetPasswordForm
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from starverse.accounts import lockout


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
    (before the password is checked), counts each failure, and clears the account's count on
    success. For the console's and the admin's log-in forms."""

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
        if email:
            lockout.login_succeeded(email)
        return cleaned


class LoginForm(LockoutMixin, AuthenticationForm):
    username = forms.CharField(label=_("E-mail"), max_length=254)


class AdminLoginForm(LockoutMixin, AdminAuthenticationForm):
    pass


class TokenForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100)


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
