"""Console pages for accounts: sign-up, e-mail verification, log-in, API tokens and SSH keys."""

from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import SESSION_KEY, login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordResetForm, SetPasswordForm
from django.contrib.auth.views import INTERNAL_RESET_SESSION_TOKEN
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from billing.choices import TrialStatus
from billing.onboarding import user_email_verify_token, user_signup
from billing.selectors import trial_state
from starverse.accounts import lockout, loginflow
from starverse.accounts.access import access_changed
from starverse.accounts.forms import (
    PERSONAL,
    LoginForm,
    OtpForm,
    ResetPasswordForm,
    SettingsForm,
    SignupForm,
    SshKeyForm,
    TokenCapsForm,
    TokenForm,
    TotpConfirmForm,
    TotpDisableForm,
)
from starverse.accounts.models import ApiToken, SshKey, User
from starverse.accounts.selectors import (
    recovery_codes_left,
    totp_device_confirmed,
    two_factor_enabled,
    two_factor_required_for_login,
    user_settings,
)
from starverse.accounts.services import (
    email_verification_send,
    ssh_key_add,
    ssh_key_delete,
    token_caps_change,
    token_create,
    token_revoke,
    user_password_set,
    user_settings_update,
)
from starverse.accounts.teams import teams_of
from starverse.accounts.throttles import SignupThrottle, VerifyEmailResendThrottle
from starverse.accounts.twofactor import (
    recovery_codes_regenerate,
    totp_begin,
    totp_confirm,
    totp_disable,
    totp_enrolment,
    totp_verify,
)
from starverse.accounts.verification import verification_user
from starverse.core.addresses import client_ip
from starverse.core.errors import ServiceError
from starverse.core.links import public_url
from starverse.core.money import format_fen
from starverse.core.tenancy import get_for_user, scope_to_user


def _safe_next(request: HttpRequest) -> str:
    """Where a sign-up goes afterwards (an invitation link): a path on this site, else ""."""
    wanted = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return wanted
    return ""


def signup(request: HttpRequest) -> HttpResponse:
    next_url = _safe_next(request)
    if request.user.is_authenticated:
        return redirect(next_url or "console:dashboard")
    form = SignupForm(request.POST or None, initial={"email": request.GET.get("email", "")})
    if request.method == "POST" and form.is_valid():
        throttle = SignupThrottle()
        if not throttle.allow_request(request, None):  # type: ignore[arg-type]
            form.add_error(None, _("Too many sign-ups from your address. Try again later."))
        else:
            try:
                user = user_signup(
                    email=form.cleaned_data["email"],
                    password=form.cleaned_data["password"],
                    ip=client_ip(request),
                )
            except ServiceError as error:
                field = "password" if error.code == "weak_password" else "email"
                form.add_error(field, error.message)
            else:
                login(request, user, backend="django.contrib.auth.backends.ModelBackend")
                # the dashboard has its own banner for a pending verification (with a button
                # to send the link again): the welcome does not say it a second time there
                messages.success(request, _signup_welcome(user, banner=not next_url))
                return redirect(next_url or "console:dashboard")
    return render(
        request,
        "accounts/signup.html",
        {
            "form": form,
            "trial_after_verification": settings.TRIAL_REQUIRES_VERIFICATION,
            "next": next_url,
        },
        status=400 if form.errors else 200,
    )


def _signup_welcome(user: User, *, banner: bool) -> str:
    """What the first page after sign-up says; `banner`: it is the dashboard, whose banner
    already asks for the e-mail's verification."""
    trial = trial_state(user)
    amount = format_fen(trial.amount_fen)
    if trial.status == TrialStatus.GRANTED:
        return _("Welcome! %(amount)s of trial credit is on your balance.") % {"amount": amount}
    if trial.status == TrialStatus.PENDING_VERIFICATION and banner:
        return _("Welcome! Your account works already.")
    if trial.status == TrialStatus.PENDING_VERIFICATION:
        return _(
            "Welcome! We have sent a link to %(email)s: verify your e-mail to receive your "
            "%(amount)s trial credit. Your account works already."
        ) % {"email": user.email, "amount": amount}
    return _(
        "Welcome! No trial credit was added: an account with this address or another form of "
        "it has already received the trial. Top up to rent GPUs."
    )


@require_http_methods(["GET", "POST"])
def verify_email(request: HttpRequest, token: str) -> HttpResponse:
    """The e-mailed link. GET only shows a button (mail scanners fetch links); its POST
    verifies the address and grants the trial, then says which it did."""
    error = None
    try:
        if request.method == "POST":
            verification = user_email_verify_token(token=token)
            granted = verification.trial.status == TrialStatus.GRANTED
            (messages.success if granted else messages.info)(request, verification.message)
            return redirect(
                "console:dashboard" if request.user.is_authenticated else "accounts:login"
            )
        email = verification_user(token).email
    except ServiceError as failure:
        error, email = failure, None
    return render(
        request,
        "accounts/verify_email.html",
        {"error": error, "email": email},
        status=(error.status_code if error else 200),
    )


@login_required
@require_POST
def verify_email_resend(request: HttpRequest) -> HttpResponse:
    throttle = VerifyEmailResendThrottle()
    if not throttle.allow_request(request, None):  # type: ignore[arg-type]
        messages.error(request, _("You have asked for several links already. Try again later."))
    else:
        try:
            email_verification_send(user=request.user)  # type: ignore[arg-type]
        except ServiceError as error:
            messages.info(request, error.message)
        else:
            messages.success(
                request,
                _("A new link is on its way to %(email)s.") % {"email": request.user.email},  # type: ignore[union-attr]
            )
    return redirect("console:dashboard")


class LoginView(auth_views.LoginView):
    """The password step. An account with two-factor authentication goes on to the code step
    (loginflow), signed in only after it; an operator without it (REQUIRE_2FA_FOR_STAFF) is
    signed in but sent to set it up, and reaches nothing else until then (the middleware)."""

    template_name = "accounts/login.html"
    authentication_form = LoginForm
    redirect_authenticated_user = True

    def form_valid(self, form: LoginForm) -> HttpResponse:  # type: ignore[override]
        user = form.get_user()
        if two_factor_enabled(user):
            loginflow.pending_start(self.request, user, self.get_success_url())
            return redirect("accounts:login_verify")
        loginflow.complete(self.request, user, second_factor=False)
        if two_factor_required_for_login(user):
            messages.warning(
                self.request,
                _(
                    "Operators must turn on two-factor authentication before using the console "
                    "or the admin. Set up an authenticator app below."
                ),
            )
            return redirect("accounts:security")
        return HttpResponseRedirect(self.get_success_url())

    def form_invalid(self, form: LoginForm) -> HttpResponse:  # type: ignore[override]
        response = super().form_invalid(form)
        if form.locked_out:
            response.status_code = 429
        return response


class LogoutView(auth_views.LogoutView):
    """Django's log-out, and the terminal sessions opened with this session are told to check
    again (starverse.accounts.access): they end at once instead of at their next check."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user_id = request.user.pk
        response = super().post(request, *args, **kwargs)
        if user_id is not None:
            access_changed(user_id)
        return response


def login_verify(request: HttpRequest) -> HttpResponse:
    """The code step of the log-in: the session is signed in only when the code is right."""
    user = loginflow.pending_user(request)
    if user is None:
        messages.info(request, _("Log in again: the code was not entered within 5 minutes."))
        return redirect("accounts:login")
    form = OtpForm(request.POST or None)
    status = 200
    if request.method == "POST" and form.is_valid():
        next_url = loginflow.pending_next(request)
        try:
            used = totp_verify(request=request, user=user, code=form.cleaned_data["code"])
        except ServiceError as error:
            form.add_error(None, error.message)
            status = error.status_code if error.status_code == 429 else 200
        else:
            loginflow.complete(request, user, second_factor=True)
            if used == "recovery":
                messages.warning(
                    request,
                    _(
                        "You logged in with a recovery code, which now cannot be used again "
                        "(%(n)d left). Make new ones on the Security page if you are running out."
                    )
                    % {"n": recovery_codes_left(user)},
                )
            return HttpResponseRedirect(next_url)
    return render(request, "accounts/login_verify.html", {"form": form}, status=status)


class PasswordResetView(auth_views.PasswordResetView):
    template_name = "accounts/password_reset.html"
    email_template_name = "accounts/password_reset_email.txt"
    subject_template_name = "accounts/password_reset_subject.txt"
    success_url = reverse_lazy("accounts:password_reset_done")

    def form_valid(self, form: PasswordResetForm) -> HttpResponse:
        refusal = lockout.password_reset_refusal(self.request)
        if refusal:
            form.add_error(None, refusal)
            response = self.form_invalid(form)
            response.status_code = 429
            return response
        if not lockout.password_reset_allowed_for(form.cleaned_data["email"]):
            # answered as if sent, so the page says nothing of whether the account exists
            return HttpResponseRedirect(self.get_success_url())
        return super().form_valid(form)


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    template_name = "accounts/password_reset_confirm.html"
    success_url = reverse_lazy("accounts:password_reset_complete")
    form_class = ResetPasswordForm

    def form_valid(self, form: SetPasswordForm) -> HttpResponse:
        user = user_password_set(
            user=form.user,
            password=form.cleaned_data["new_password1"],
            revoke_tokens=bool(form.cleaned_data.get("revoke_tokens")),
        )
        if self.request.session.get(SESSION_KEY) == str(user.pk):
            # this browser's own session was one of the user's: it ends too
            self.request.session.flush()
        else:
            del self.request.session[INTERNAL_RESET_SESSION_TOKEN]
        return HttpResponseRedirect(self.get_success_url())


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    user: User = request.user  # type: ignore[assignment]
    teams = teams_of(user)
    # a new token acts for the account the console is switched to, unless chosen otherwise
    initial = {"team": user.acting_team_id or PERSONAL}
    form = TokenForm(request.POST or None, teams=teams, initial=initial)
    created = None
    if request.method == "POST" and form.is_valid():
        team = form.cleaned_data["team"]
        try:
            token, plaintext = token_create(
                user=user,
                name=form.cleaned_data["name"],
                team_id=None if team == PERSONAL else team,
                scopes=form.cleaned_data["scopes"],
                ip=client_ip(request),
                caps=form.caps(),
            )
        except ServiceError as error:
            form.add_error(None, error.message)
        else:
            created = {"token": token, "plaintext": plaintext}
            form = TokenForm(teams=teams, initial=initial)
    rows = scope_to_user(
        ApiToken.objects.filter(revoked_at__isnull=True).select_related("team"), user, "user"
    )
    needs_2fa = settings.REQUIRE_2FA_FOR_API_TOKENS and not two_factor_enabled(request.user)  # type: ignore[arg-type]
    return render(
        request,
        "accounts/tokens.html",
        {
            "form": form,
            "tokens": rows,
            "created": created,
            "needs_2fa": needs_2fa,
            # the CLI's own default is 127.0.0.1:8000: the line names this server
            "login_command": f"starverse login --api-url {public_url()}",
            "active": "tokens",
        },
    )


@login_required
@require_POST
def token_caps(request: HttpRequest, pk: str) -> HttpResponse:
    """The caps form of a token's row: what is typed is the whole of its caps (empty: none),
    lower or higher, as the owner's session may."""
    token = get_for_user(ApiToken.objects.filter(revoked_at__isnull=True), request.user, "user", pk)
    form = TokenCapsForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(str(error) for error in errors))
        return redirect("accounts:tokens")
    try:
        token_caps_change(
            token=token,
            changes=asdict(form.caps()),
            actor=request.user,  # type: ignore[arg-type]
            ip=client_ip(request),
        )
    except ServiceError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("Caps of “%(name)s” saved.") % {"name": token.name})
    return redirect("accounts:tokens")


@login_required
@require_POST
def token_delete(request: HttpRequest, pk: str) -> HttpResponse:
    token = get_for_user(ApiToken.objects.filter(revoked_at__isnull=True), request.user, "user", pk)
    token_revoke(token=token, actor=request.user, ip=client_ip(request))
    messages.success(request, _("Token “%(name)s” revoked.") % {"name": token.name})
    return redirect("accounts:tokens")


@login_required
def ssh_keys(request: HttpRequest) -> HttpResponse:
    form = SshKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            key = ssh_key_add(
                user=request.user,  # type: ignore[arg-type]
                name=form.cleaned_data["name"],
                public_key=form.cleaned_data["public_key"],
            )
        except ServiceError as error:
            form.add_error("public_key", error.message)
        else:
            messages.success(request, _("Key added: %(fp)s") % {"fp": key.fingerprint})
            return redirect("accounts:ssh_keys")
    rows = scope_to_user(SshKey.objects.all(), request.user, "user")
    return render(
        request,
        "accounts/ssh_keys.html",
        {"form": form, "keys": rows, "active": "ssh_keys"},
        status=400 if form.errors else 200,
    )


@login_required
@require_POST
def ssh_key_remove(request: HttpRequest, pk: str) -> HttpResponse:
    key = get_for_user(SshKey.objects.all(), request.user, "user", pk)
    ssh_key_delete(key=key)
    messages.success(request, _("Key “%(name)s” deleted.") % {"name": key.name})
    return redirect("accounts:ssh_keys")


# The Security page shows both forms that ask for a code: their fields need distinct HTML ids.
REGENERATE_IDS = "regenerate_%s"
DISABLE_IDS = "disable_%s"


def _status(error: ServiceError) -> int:
    return 429 if error.status_code == 429 else 400


def _security_page(
    request: HttpRequest,
    *,
    confirm_form: TotpConfirmForm | None = None,
    regenerate_form: OtpForm | None = None,
    disable_form: TotpDisableForm | None = None,
    new_codes: list[str] | None = None,
    status: int = 200,
) -> HttpResponse:
    user: User = request.user  # type: ignore[assignment]
    device = totp_device_confirmed(user)
    context = {
        "device": device,
        "enrolment": None if device else totp_enrolment(user=user),
        "required": two_factor_required_for_login(user),
        "codes_left": recovery_codes_left(user) if device else 0,
        "new_codes": new_codes,
        "confirm_form": confirm_form or TotpConfirmForm(),
        "regenerate_form": regenerate_form or OtpForm(auto_id=REGENERATE_IDS),
        "disable_form": disable_form or TotpDisableForm(auto_id=DISABLE_IDS),
        "active": "security",
    }
    return render(request, "accounts/security.html", context, status=status)


@login_required
def security(request: HttpRequest) -> HttpResponse:
    """Two-factor authentication: set it up, see how many recovery codes are left, make new
    ones, switch it off."""
    return _security_page(request)


@login_required
@require_POST
def security_enrol(request: HttpRequest) -> HttpResponse:
    try:
        totp_begin(user=request.user)  # type: ignore[arg-type]
    except ServiceError as error:
        messages.error(request, error.message)
    return redirect("accounts:security")


@login_required
@require_POST
def security_confirm(request: HttpRequest) -> HttpResponse:
    form = TotpConfirmForm(request.POST)
    if not form.is_valid():
        return _security_page(request, confirm_form=form, status=400)
    user: User = request.user  # type: ignore[assignment]
    try:
        codes = totp_confirm(user=user, code=form.cleaned_data["code"])
    except ServiceError as error:
        form.add_error("code", error.message)
        return _security_page(request, confirm_form=form, status=400)
    # the session just proved the factor: it counts as passed, under a new key
    request.session.cycle_key()
    loginflow.mark_verified(request, user)
    messages.success(request, _("Two-factor authentication is on."))
    return _security_page(request, new_codes=codes)


@login_required
@require_POST
def security_recovery_codes(request: HttpRequest) -> HttpResponse:
    form = OtpForm(request.POST, auto_id=REGENERATE_IDS)
    if not form.is_valid():
        return _security_page(request, regenerate_form=form, status=400)
    try:
        codes = recovery_codes_regenerate(
            request=request,
            user=request.user,  # type: ignore[arg-type]
            code=form.cleaned_data["code"],
        )
    except ServiceError as error:
        form.add_error("code", error.message)
        return _security_page(request, regenerate_form=form, status=_status(error))
    messages.success(request, _("New recovery codes made; the old ones no longer work."))
    return _security_page(request, new_codes=codes)


@login_required
@require_POST
def security_disable(request: HttpRequest) -> HttpResponse:
    form = TotpDisableForm(request.POST, auto_id=DISABLE_IDS)
    if not form.is_valid():
        return _security_page(request, disable_form=form, status=400)
    try:
        totp_disable(
            request=request,
            user=request.user,  # type: ignore[arg-type]
            password=form.cleaned_data["password"],
            code=form.cleaned_data["code"],
        )
    except ServiceError as error:
        form.add_error(None, error.message)
        return _security_page(request, disable_form=form, status=_status(error))
    messages.success(request, _("Two-factor authentication is off."))
    return redirect("accounts:security")


SETTINGS_FIELDS = (
    "idle_stop_enabled",
    "idle_stop_util_pct",
    "idle_stop_minutes",
    "idle_warn_minutes",
)


@login_required
def account_settings(request: HttpRequest) -> HttpResponse:
    """The defaults of the user's orders: whether new instances stop when idle, and when."""
    user: User = request.user  # type: ignore[assignment]
    current = user_settings(user)
    initial = {name: getattr(current, name) for name in SETTINGS_FIELDS}
    form = SettingsForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            user_settings_update(user=user, **form.cleaned_data)
        except ServiceError as error:
            form.add_error(None, error.message)
        else:
            messages.success(
                request, _("Settings saved. They apply to instances you order from now on.")
            )
            return redirect("accounts:settings")
    return render(
        request,
        "accounts/settings.html",
        {"form": form, "active": "settings"},
        status=400 if form.errors else 200,
    )
