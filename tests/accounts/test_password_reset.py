import re

from django.contrib.sessions.models import Session
from django.core import mail
from django.test import Client
from django.urls import reverse

from starverse.accounts.models import ApiToken
from tests.factories import PASSWORD, make_token, make_user

NEW_PASSWORD = "a brand new passphrase 42"


def _sessions_of(user):
    return len(
        [s for s in Session.objects.all() if s.get_decoded().get("_auth_user_id") == str(user.pk)]
    )


def _reset_link(client, email):
    client.post(reverse("accounts:password_reset"), {"email": email})
    match = re.search(
        r"https?://[^/\s]+(/accounts/password-reset/\S+/\S+/)", str(mail.outbox[-1].body)
    )
    assert match, mail.outbox[-1].body
    return match.group(1)


def _complete_reset(client, email, **extra):
    page = client.get(_reset_link(client, email), follow=True)
    assert page.status_code == 200
    assert "revoke_tokens" in page.content.decode()
    assert 'name="revoke_tokens"' in page.content.decode()
    assert "checked" in page.content.decode()
    done = client.post(
        page.redirect_chain[-1][0],
        {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD, **extra},
    )
    assert done.status_code == 302
    assert done.url == reverse("accounts:password_reset_complete")


def test_reset_ends_every_session_and_revokes_tokens_by_default(db, api):
    user = make_user()
    _token, plaintext = make_token(user)
    laptop, phone = Client(), Client()
    laptop.force_login(user)
    phone.force_login(user)
    assert _sessions_of(user) == 2

    _complete_reset(Client(), user.email, revoke_tokens="on")

    assert _sessions_of(user) == 0
    assert api.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {plaintext}").status_code == 401
    assert not ApiToken.objects.filter(user=user, revoked_at__isnull=True).exists()
    assert laptop.get(reverse("console:dashboard")).status_code == 302
    user.refresh_from_db()
    assert user.check_password(NEW_PASSWORD)


def test_reset_can_keep_the_tokens(db, api):
    user = make_user()
    _token, plaintext = make_token(user)
    other = make_user()
    other_client = Client()
    other_client.force_login(other)

    _complete_reset(Client(), user.email)  # the box unticked: not sent

    assert api.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {plaintext}").status_code == 200
    assert other_client.get(reverse("console:dashboard")).status_code == 200
    assert _sessions_of(other) == 1


def test_reset_from_the_users_own_signed_in_browser_logs_it_out(db):
    user = make_user()
    browser = Client()
    browser.force_login(user)

    _complete_reset(browser, user.email, revoke_tokens="on")

    assert _sessions_of(user) == 0
    assert browser.get(reverse("console:dashboard")).status_code == 302
    assert Client().login(email=user.email, password=NEW_PASSWORD)
    assert not Client().login(email=user.email, password=PASSWORD)
