from django import forms
from django.contrib.auth.forms import AuthenticationForm, SetPasswordForm
from django.utils.translation import gettext_lazy as _


class SignupForm(forms.Form):
    email = forms.EmailField(label=_("E-mail"), max_length=254)
    password = forms.CharField(
        label=_("Password"),
        max_length=128,
        strip=False,
        widget=forms.PasswordInput,
        help_text=_("At least 10 characters, not only digits, not a common password."),
    )


class LoginForm(AuthenticationForm):
    username = forms.CharField(label=_("E-mail"), max_length=254)


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
