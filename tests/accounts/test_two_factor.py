"""Two-factor authentication: enrolment, the code step of the log-in, replay and recovery codes,
operators held to it in the console and the admin, the API's token log-in (second factor and
lock-out), REQUIRE_2FA_FOR_API_TOKENS, password resets and the operators' reset command.

Codes are computed from the secret with pyotp at the time of the request. Enrolment accepts the
current step's code, so the next log-in in a test uses the next step's (`_later`), which the
drift window accepts and which is later than the last one used."""

import re
import time
from io import StringIO

import pyotp
import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.core import mail
from django.core.management import CommandError, call_command
from django.test import Client, RequestFactory
from django.urls import reverse
from rest_framework.test import APIClient

from starverse.accounts import loginflow
from starverse.accounts.models import ApiToken, RecoveryCode, TotpDevice
from starverse.accounts.totp import recovery_code_hash
from starverse.accounts.twofactor import totp_verify
from starverse.core.errors import TooManyAttempts, Unauthenticated
from tests.factories import PASSWORD, enrol_totp, make_operator, make_user, staff_login

SECURITY = "/accounts/security/"
VERIFY = "/accounts/login/verify/"
NEW_PASSWORD = "a brand new passphrase 42"


def _now(secret):
    return pyotp.TOTP(secret).at(time.time())


def _later(secret):
    """The next time step's code: accepted (drift) and later than the one enrolment used."""
    return pyotp.TOTP(secret).at(time.time() + 30)


def _wrong(secret):
    """A code of none of the accepted steps (an hour ago, made different if it collides)."""
    taken = {pyotp.TOTP(secret).at(time.time() + 30 * k) for k in (-1, 0, 1, 2)}
    code = pyotp.TOTP(secret).at(time.time() - 3600)
    while code in taken:
        code = f"{(int(code) + 1) % 10**6:06d}"
    return code


def _password_step(client, email, password=PASSWORD, next_url=None):
    data = {"username": email, "password": password}
    if next_url:
        data["next"] = next_url
    return client.post(reverse("accounts:login"), data)


def _signed_in(client):
    return client.get(reverse("console:dashboard")).wsgi_request.user.is_authenticated


def _request(address="10.0.0.1"):
    request = RequestFactory().post("/", REMOTE_ADDR=address)
    request.session = SessionStore()
    return request


# --- enrolment and the console log-in --------------------------------------------------------


def test_enrolment_shows_a_qr_code_once_and_log_in_then_asks_for_the_code(db, client):
    user = make_user()
    client.force_login(user)
    assert "Set up two-factor authentication" in client.get(SECURITY).content.decode()

    client.post(reverse("accounts:security_enrol"))
    page = client.get(SECURITY).content.decode()
    device = TotpDevice.objects.get(user=user)
    grouped = " ".join(device.secret[i : i + 4] for i in range(0, 32, 4))
    assert device.confirmed_at is None
    assert '<svg viewBox="0 0' in page and 'class="segno"' in page
    assert grouped in page

    wrong = client.post(reverse("accounts:security_confirm"), {"code": _wrong(device.secret)})
    assert wrong.status_code == 400
    assert "That code is not right" in wrong.content.decode()
    assert TotpDevice.objects.get(user=user).confirmed_at is None

    confirmed = client.post(reverse("accounts:security_confirm"), {"code": _now(device.secret)})
    shown = confirmed.content.decode()
    codes = re.findall(r"\b[0-9a-z]{4}-[0-9a-z]{4}-[0-9a-z]{4}\b", shown)
    assert confirmed.status_code == 200
    assert len(set(codes)) == 10
    assert {recovery_code_hash(c) for c in codes} == set(
        RecoveryCode.objects.filter(user=user).values_list("code_hash", flat=True)
    )
    after = client.get(SECURITY).content.decode()
    assert "10 unused recovery codes" in after
    assert after.count('id="regenerate_code"') == after.count('id="disable_code"') == 1
    assert device.secret not in after and grouped not in after and "segno" not in after
    assert not any(code in after for code in codes)

    client.logout()
    password = _password_step(client, user.email)
    assert (password.status_code, password["Location"]) == (302, VERIFY)
    assert not _signed_in(client)
    before = client.cookies["sessionid"].value

    done = client.post(VERIFY, {"code": _later(device.secret)})

    assert (done.status_code, done["Location"]) == (302, reverse("console:dashboard"))
    assert _signed_in(client)
    assert client.cookies["sessionid"].value != before


def test_a_code_logs_in_once_and_older_codes_are_refused(db):
    user = make_user()
    secret, _codes = enrol_totp(user)  # used the current step's code
    request = _request()

    with pytest.raises(Unauthenticated) as replayed_enrolment:
        totp_verify(request=request, user=user, code=_now(secret))
    at = time.time() + 30
    later = pyotp.TOTP(secret).at(at)
    assert totp_verify(request=request, user=user, code=later) == "totp"
    with pytest.raises(Unauthenticated) as replayed:
        totp_verify(request=request, user=user, code=later)

    assert replayed_enrolment.value.code == replayed.value.code == "otp_invalid"
    assert TotpDevice.objects.get(user=user).last_used_step == int(at) // 30


def test_a_recovery_code_works_once_typed_any_way(db):
    user = make_user()
    _secret, codes = enrol_totp(user)
    request = _request()

    assert totp_verify(request=request, user=user, code=codes[0].upper().replace("-", " ")) == (
        "recovery"
    )
    with pytest.raises(Unauthenticated):
        totp_verify(request=request, user=user, code=codes[0])
    assert totp_verify(request=request, user=user, code=codes[1]) == "recovery"
    assert RecoveryCode.objects.filter(user=user, used_at__isnull=True).count() == 8


def test_console_log_in_with_a_recovery_code_says_how_many_are_left(db, client):
    user = make_user()
    _secret, codes = enrol_totp(user)

    _password_step(client, user.email)
    done = client.post(VERIFY, {"code": codes[3]}, follow=True)

    assert _signed_in(client)
    assert "You logged in with a recovery code" in done.content.decode()
    assert "(9 left)" in done.content.decode()


def test_new_recovery_codes_replace_the_old_ones(db, client):
    user = make_user()
    secret, old = enrol_totp(user)
    client.force_login(user)

    refused = client.post(reverse("accounts:security_recovery_codes"), {"code": _wrong(secret)})
    assert refused.status_code == 400
    assert RecoveryCode.objects.filter(user=user).count() == 10
    assert {recovery_code_hash(c) for c in old} == set(
        RecoveryCode.objects.filter(user=user).values_list("code_hash", flat=True)
    )

    made = client.post(reverse("accounts:security_recovery_codes"), {"code": _later(secret)})
    new = re.findall(r"\b[0-9a-z]{4}-[0-9a-z]{4}-[0-9a-z]{4}\b", made.content.decode())

    assert made.status_code == 200 and len(set(new)) == 10 and not set(new) & set(old)
    with pytest.raises(Unauthenticated):
        totp_verify(request=_request(), user=user, code=old[0])
    assert totp_verify(request=_request(), user=user, code=new[0]) == "recovery"


def test_the_code_step_expires_after_five_minutes(db, client):
    user = make_user()
    secret, _codes = enrol_totp(user)
    _password_step(client, user.email)
    session = client.session
    session[loginflow.PENDING_KEY] = {**session[loginflow.PENDING_KEY], "until": time.time() - 1}
    session.save()
    step = TotpDevice.objects.get(user=user).last_used_step

    late = client.post(VERIFY, {"code": _later(secret)})

    assert (late.status_code, late["Location"]) == (302, reverse("accounts:login"))
    assert not _signed_in(client)
    assert TotpDevice.objects.get(user=user).last_used_step == step
    assert loginflow.PENDING_KEY not in client.session


def test_wrong_codes_count_toward_the_account_lock_out_even_with_the_right_password(db):
    user = make_user()
    secret, _codes = enrol_totp(user)
    attacker = Client(REMOTE_ADDR="10.7.0.1")

    answers = []
    for _ in range(10):
        assert _password_step(attacker, user.email).status_code == 302
        answers.append(attacker.post(VERIFY, {"code": _wrong(secret)}).status_code)
    locked_password = _password_step(Client(REMOTE_ADDR="10.7.0.2"), user.email)

    assert answers == [200] * 10
    assert locked_password.status_code == 429
    assert "Too many failed attempts for this account" in locked_password.content.decode()
    assert not _signed_in(attacker)


def test_the_code_step_refuses_while_locked_out(db, settings):
    user = make_user()
    secret, _codes = enrol_totp(user)
    client = Client()
    _password_step(client, user.email)
    for _ in range(settings.LOGIN_FAILURES_PER_ACCOUNT):
        client.post(VERIFY, {"code": _wrong(secret)})

    locked = client.post(VERIFY, {"code": _later(secret)})

    assert locked.status_code == 429
    assert not _signed_in(client)
    with pytest.raises(TooManyAttempts):
        totp_verify(request=_request(), user=user, code=_later(secret))


def test_users_turn_it_off_with_password_and_code(db, client):
    user = make_user()
    secret, _codes = enrol_totp(user)
    client.force_login(user)

    wrong_password = client.post(
        reverse("accounts:security_disable"), {"password": "not it at all", "code": _later(secret)}
    )
    assert wrong_password.status_code == 400
    assert "That is not your password." in wrong_password.content.decode()
    assert TotpDevice.objects.filter(user=user).exists()

    off = client.post(
        reverse("accounts:security_disable"), {"password": PASSWORD, "code": _later(secret)}
    )

    assert off.status_code == 302
    assert not TotpDevice.objects.filter(user=user).exists()
    assert not RecoveryCode.objects.filter(user=user).exists()
    client.logout()
    assert _password_step(client, user.email)["Location"] == reverse("console:dashboard")


def test_enrolment_cannot_replace_a_confirmed_device(db, client):
    user = make_user()
    secret, _codes = enrol_totp(user)
    client.force_login(user)

    page = client.post(reverse("accounts:security_enrol"), follow=True).content.decode()

    assert "already on" in page
    assert TotpDevice.objects.get(user=user).secret == secret


# --- operators -------------------------------------------------------------------------------


ADMIN_PAGES = ["/admin/", "/admin/accounts/user/", "/admin/billing/wallet/", "/admin/fleet/node/"]


def test_an_operator_with_a_password_only_reaches_no_admin_or_console_page(db):
    operator = make_operator()
    client = Client()

    password = _password_step(client, operator.email, next_url="/admin/")
    assert (password.status_code, password["Location"]) == (302, SECURITY)

    for path in [*ADMIN_PAGES, "/console/", "/accounts/tokens/", "/admin/login/"]:
        final = client.get(path, follow=True)
        assert final.redirect_chain[-1] == (SECURITY, 302), path
        assert "Operators must turn on two-factor authentication" in final.content.decode()
        assert "Site administration" not in final.content.decode()
    posted = client.post("/admin/accounts/user/", {"action": "delete_selected"})
    assert (posted.status_code, posted["Location"]) == (302, SECURITY)
    # the session is not a credential for the API either
    assert client.get("/api/v1/me").status_code == 401

    # setting it up lets the same session in
    client.post(reverse("accounts:security_enrol"))
    secret = TotpDevice.objects.get(user=operator).secret
    client.post(reverse("accounts:security_confirm"), {"code": _now(secret)})
    assert client.get("/admin/").status_code == 200
    assert client.get("/api/v1/me").status_code == 200


def test_an_operator_with_a_device_must_pass_the_code_to_open_the_admin(db):
    operator = make_operator()
    secret, _codes = enrol_totp(operator)
    client = Client()

    start = client.get("/admin/fleet/node/", follow=True)
    assert start.redirect_chain[-1] == ("/accounts/login/?next=/admin/fleet/node/", 302)
    password = _password_step(client, operator.email, next_url="/admin/fleet/node/")
    assert password["Location"] == VERIFY
    pending = client.get("/admin/fleet/node/", follow=True)
    assert pending.redirect_chain[-1][0].startswith("/accounts/login/")
    assert "Site administration" not in pending.content.decode()

    done = client.post(VERIFY, {"code": _later(secret)})

    assert done["Location"] == "/admin/fleet/node/"
    assert client.get("/admin/fleet/node/").status_code == 200


def test_an_operator_session_without_the_code_step_is_ended(db):
    """A session signed in another way (from before two-factor, or a bug) does not count."""
    operator = make_operator()
    enrol_totp(operator)
    client = Client()
    client.force_login(operator)

    answer = client.get("/admin/accounts/user/")

    assert (answer.status_code, answer["Location"]) == (
        302,
        "/accounts/login/?next=/admin/accounts/user/",
    )
    assert not _signed_in(client)


def test_the_admin_site_itself_wants_the_second_factor(db, rf):
    """Behind the middleware, the admin's own permission check asks for it too."""
    operator = make_operator()
    request = rf.get("/admin/")
    request.user = operator
    request.session = {}

    assert not admin.site.has_permission(request)
    request.session[loginflow.VERIFIED_KEY] = str(operator.pk)
    assert admin.site.has_permission(request)


def test_operators_cannot_turn_it_off(db, client):
    operator = staff_login(client, make_operator())
    secret = TotpDevice.objects.get(user=operator).secret

    refused = client.post(
        reverse("accounts:security_disable"), {"password": PASSWORD, "code": _later(secret)}
    )

    assert refused.status_code == 400
    assert "Operators must keep two-factor authentication on." in refused.content.decode()
    assert TotpDevice.objects.filter(user=operator, confirmed_at__isnull=False).exists()


def test_without_the_staff_rule_an_operator_logs_in_with_the_password(db, client, settings):
    settings.REQUIRE_2FA_FOR_STAFF = False
    operator = make_operator()

    password = _password_step(client, operator.email, next_url="/admin/")

    assert password["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200


def test_a_renter_is_refused_the_admin(db, client):
    client.force_login(make_user())

    assert client.get("/admin/login/").status_code == 403


# --- the API's token log-in ------------------------------------------------------------------


def _token_login(api, email, password=PASSWORD, **extra):
    return api.post(
        "/api/v1/auth/token", {"email": email, "password": password, **extra}, format="json"
    )


def test_token_log_in_asks_for_the_second_factor(db, api):
    user = make_user()
    secret, codes = enrol_totp(user)

    missing = _token_login(api, user.email)
    wrong = _token_login(api, user.email, otp=_wrong(secret))
    later = _later(secret)
    right = _token_login(api, user.email, otp=later, name="ci")
    replayed = _token_login(api, user.email, otp=later)
    recovery = _token_login(api, user.email, otp=codes[0])
    recovery_again = _token_login(api, user.email, otp=codes[0])

    assert (missing.status_code, missing.json()["code"]) == (401, "otp_required")
    assert (wrong.status_code, wrong.json()["code"]) == (401, "otp_invalid")
    assert (replayed.status_code, replayed.json()["code"]) == (401, "otp_invalid")
    assert (recovery_again.status_code, recovery_again.json()["code"]) == (401, "otp_invalid")
    assert right.status_code == recovery.status_code == 201
    assert right.json()["name"] == "ci"
    assert ApiToken.objects.filter(user=user).count() == 2
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {right.json()['token']}")
    assert api.get("/api/v1/me").status_code == 200


def test_token_log_in_is_locked_out_per_account(db, api):
    user = make_user()

    wrong = [_token_login(api, user.email, "wrong password!").status_code for _ in range(10)]
    locked = _token_login(api, user.email)
    elsewhere = _token_login(APIClient(REMOTE_ADDR="10.3.3.3"), user.email)

    assert wrong == [401] * 10
    assert locked.status_code == 429
    assert locked.json()["code"] == "locked_out"
    assert "Too many failed attempts for this account" in locked.json()["detail"]
    assert elsewhere.status_code == 429
    assert not ApiToken.objects.filter(user=user).exists()
    # the console's log-in shares the count
    assert _password_step(Client(), user.email).status_code == 429


def test_token_log_in_is_locked_out_per_address(db, settings):
    settings.LOGIN_FAILURES_PER_ADDRESS = 5
    user = make_user()
    guesser = APIClient(REMOTE_ADDR="10.4.4.4")

    wrong = [
        _token_login(guesser, f"nobody{i}@lab.cn", "wrong password!").status_code for i in range(5)
    ]
    locked = _token_login(guesser, user.email)
    other_address = _token_login(APIClient(REMOTE_ADDR="10.4.4.5"), user.email)

    assert wrong == [401] * 5
    assert (locked.status_code, locked.json()["code"]) == (429, "locked_out")
    assert "from your network" in locked.json()["detail"]
    assert other_address.status_code == 201


def test_wrong_codes_lock_the_token_log_in_out(db, api):
    user = make_user()
    secret, _codes = enrol_totp(user)

    wrong = [_token_login(api, user.email, otp=_wrong(secret)).status_code for _ in range(10)]
    locked = _token_login(api, user.email, otp=_later(secret))

    assert wrong == [401] * 10
    assert (locked.status_code, locked.json()["code"]) == (429, "locked_out")
    assert not ApiToken.objects.filter(user=user).exists()


def test_an_operator_without_a_device_gets_no_token(db, api):
    operator = make_operator()

    refused = _token_login(api, operator.email)

    assert (refused.status_code, refused.json()["code"]) == (403, "2fa_required")
    assert "/accounts/security/" in refused.json()["detail"]
    assert not ApiToken.objects.filter(user=operator).exists()


# --- REQUIRE_2FA_FOR_API_TOKENS --------------------------------------------------------------


def test_tokens_need_two_factor_when_the_operator_says_so(db, api, client, client_for, settings):
    user = make_user()
    bearer = client_for(user)  # a token made before the setting was turned on
    settings.REQUIRE_2FA_FOR_API_TOKENS = True
    client.force_login(user)

    page = client.get("/accounts/tokens/").content.decode()
    console = client.post(
        "/accounts/tokens/", {"name": "notebook", "team": "personal", "scopes": ["read"]}
    )
    by_token = bearer.post("/api/v1/tokens", {"name": "ci"}, format="json")
    by_password = _token_login(api, user.email)

    assert "Creating API tokens needs two-factor authentication" in page
    assert "Turn on two-factor authentication first" in console.content.decode()
    assert (by_token.status_code, by_token.json()["code"]) == (403, "2fa_required")
    assert by_token.json()["detail"].endswith("http://127.0.0.1:8000/accounts/security/")
    assert (by_password.status_code, by_password.json()["code"]) == (403, "2fa_required")
    assert ApiToken.objects.filter(user=user).count() == 1

    secret, _codes = enrol_totp(user)
    assert bearer.post("/api/v1/tokens", {"name": "ci"}, format="json").status_code == 201
    assert _token_login(api, user.email, otp=_later(secret)).status_code == 201


def test_sign_up_still_answers_with_a_token_when_tokens_need_two_factor(db, api, settings):
    settings.REQUIRE_2FA_FOR_API_TOKENS = True

    signed_up = api.post(
        "/api/v1/auth/signup",
        {"email": "new@lab.example.edu.cn", "password": PASSWORD},
        format="json",
    )

    assert signed_up.status_code == 201
    assert signed_up.json()["token"].startswith("sv_")


def test_the_api_tells_whether_two_factor_is_on(db, client_for, settings):
    user = make_user()
    client = client_for(user)
    operator = client_for(make_operator())
    off = client.get("/api/v1/me/2fa").json()
    settings.REQUIRE_2FA_FOR_API_TOKENS = True
    enrol_totp(user)
    on = client.get("/api/v1/me/2fa").json()

    assert off == {
        "enabled": False,
        "confirmed_at": None,
        "recovery_codes_left": 0,
        "required_for_login": False,
        "required_for_tokens": False,
    }
    assert on["enabled"] is True and on["confirmed_at"] is not None
    assert (on["recovery_codes_left"], on["required_for_tokens"]) == (10, True)
    assert operator.get("/api/v1/me/2fa").json()["required_for_login"] is True


# --- password reset and the operators' reset -------------------------------------------------


def test_a_password_reset_does_not_skip_the_second_factor(db):
    user = make_user()
    secret, _codes = enrol_totp(user)
    # someone with the old password is at the code step when the owner resets it
    intruder = Client(REMOTE_ADDR="10.8.0.1")
    assert _password_step(intruder, user.email)["Location"] == VERIFY

    browser = Client()
    browser.post(reverse("accounts:password_reset"), {"email": user.email})
    link = re.search(
        r"https?://[^/\s]+(/accounts/password-reset/\S+/\S+/)", str(mail.outbox[-1].body)
    )
    assert link
    form = browser.get(link.group(1), follow=True)
    done = browser.post(
        form.redirect_chain[-1][0], {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}
    )
    assert done["Location"] == reverse("accounts:password_reset_complete")
    assert not _signed_in(browser)

    stale = intruder.post(VERIFY, {"code": _later(secret)})
    assert (stale.status_code, stale["Location"]) == (302, reverse("accounts:login"))
    assert not _signed_in(intruder)

    password = _password_step(browser, user.email, NEW_PASSWORD)
    assert password["Location"] == VERIFY
    assert not _signed_in(browser)
    assert browser.post(VERIFY, {"code": _later(secret)}).status_code == 302
    assert _signed_in(browser)
    assert TotpDevice.objects.filter(user=user, confirmed_at__isnull=False).exists()


def test_operators_reset_a_lost_device_with_a_recorded_reason(db):
    user = make_user()
    enrol_totp(user)
    operator = make_operator()
    signed_in = Client()
    signed_in.force_login(user)
    out = StringIO()

    call_command(
        "totp_reset",
        user.email.upper(),
        operator=operator.email,
        reason="identity checked by video call",
        stdout=out,
    )

    assert not TotpDevice.objects.filter(user=user).exists()
    assert not RecoveryCode.objects.filter(user=user).exists()
    entry = LogEntry.objects.get(object_id=user.pk)
    assert entry.user_id == operator.pk
    assert entry.change_message == "Two-factor authentication reset: identity checked by video call"
    assert "removed; their sessions ended" in out.getvalue()
    assert not [
        s for s in Session.objects.all() if s.get_decoded().get("_auth_user_id") == str(user.pk)
    ]
    assert _password_step(Client(), user.email)["Location"] == reverse("console:dashboard")


def test_the_reset_command_refuses_without_an_operator_or_a_reason(db):
    user = make_user()
    enrol_totp(user)
    renter = make_user()

    with pytest.raises(CommandError, match="Only an active operator"):
        call_command("totp_reset", user.email, operator=renter.email, reason="asked nicely")
    with pytest.raises(CommandError, match="Give the reason"):
        call_command("totp_reset", user.email, operator=make_operator().email, reason="  ")
    with pytest.raises(CommandError, match="No account"):
        call_command("totp_reset", "ghost@lab.cn", operator=renter.email, reason="x")

    assert TotpDevice.objects.filter(user=user).exists()
    assert RecoveryCode.objects.filter(user=user).count() == 10
    assert not LogEntry.objects.exists()
