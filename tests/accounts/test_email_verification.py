"""The trial waits for the address to be verified by an e-mailed link, and goes to one account
per canonical address."""

import importlib
from datetime import timedelta

import pytest
from django.apps import apps
from django.urls import reverse
from django.utils import timezone

from billing.choices import TransactionKind, TrialStatus
from billing.models import LedgerTransaction, Wallet
from billing.onboarding import user_email_verify, user_signup
from billing.selectors import trial_state
from billing.services import ledger_post
from starverse.accounts.models import User
from starverse.accounts.services import user_email_change
from starverse.accounts.verification import verification_email_send, verification_token
from starverse.core.adminurls import admin_change_url
from tests.conftest import run_threads
from tests.factories import PASSWORD, make_instance, make_operator, make_user, staff_login

GRANTED = "Your e-mail address is verified: ¥10.00 of trial credit is on your balance."
NO_TRIAL = "no trial credit was added: the trial is given once per mailbox"


def _trials() -> list[tuple[str, str, int]]:
    return sorted(
        LedgerTransaction.objects.filter(kind=TransactionKind.TRIAL).values_list(
            "wallet__tenant__members__email", "idempotency_key", "amount_fen"
        )
    )


def _promo(user: User) -> int:
    return Wallet.objects.get(tenant=user.tenant).promo_fen


def _link_path(mail) -> str:
    link = next(line for line in mail.body.splitlines() if "/accounts/verify-email/" in line)
    assert link.startswith("http://127.0.0.1:8000/accounts/verify-email/"), link
    return link[link.index("/accounts/") :].strip()


def _verify_api(api, token: str):
    return api.post("/api/v1/auth/verify-email", {"token": token}, format="json")


@pytest.fixture
def signed_up(client, db, mailoutbox, django_capture_on_commit_callbacks):
    """A person who signed up on the console (and is logged in there) and got the link."""
    with django_capture_on_commit_callbacks(execute=True):
        client.post(
            reverse("accounts:signup"), {"email": "Li.Lei+cloud@PKU.edu.cn", "password": PASSWORD}
        )
    assert len(mailoutbox) == 1
    return User.objects.get(), _link_path(mailoutbox[0])


def test_the_mail_carries_the_link_its_lifetime_and_the_trial(signed_up, mailoutbox):
    mail = mailoutbox[0]

    assert mail.to == ["li.lei+cloud@pku.edu.cn"]
    assert mail.subject == "Verify your e-mail address for Starverse"
    assert "Verifying adds your ¥10.00 trial credit (once per e-mail address)." in mail.body
    assert "The link works once and for 3 days." in mail.body


def test_opening_the_link_shows_a_button_and_verifies_nothing(client, signed_up):
    user, path = signed_up

    page = client.get(path)

    assert page.status_code == 200
    html = page.content.decode()
    assert "Confirm that li.lei+cloud@pku.edu.cn is your address." in html
    assert '<form method="post"' in html
    user.refresh_from_db()
    assert user.email_verified_at is None
    assert _trials() == []


def test_posting_the_link_verifies_and_grants_the_trial_once(client, signed_up):
    user, path = signed_up

    done = client.post(path)

    assert (done.status_code, done.url) == (302, reverse("console:dashboard"))
    user.refresh_from_db()
    assert user.email_verified_at is not None
    assert _trials() == [("li.lei+cloud@pku.edu.cn", "trial:li.lei@pku.edu.cn", 1000)]
    assert _promo(user) == 1000
    dashboard = client.get(reverse("console:dashboard")).content.decode()
    assert GRANTED in dashboard
    assert "Verify your e-mail to receive" not in dashboard

    again = client.post(path)
    reopened = client.get(path)

    assert again.status_code == reopened.status_code == 409
    assert "Your e-mail address is already verified; this link has been used." in (
        again.content.decode()
    )
    assert _trials() == [("li.lei+cloud@pku.edu.cn", "trial:li.lei@pku.edu.cn", 1000)]


def test_the_link_works_without_being_logged_in(client, signed_up):
    _user, path = signed_up
    client.logout()

    done = client.post(path)

    assert (done.status_code, done.url) == (302, reverse("accounts:login"))
    assert GRANTED in client.get(done.url).content.decode()


def test_an_alias_of_a_verified_address_verifies_but_gets_no_trial_and_is_told_why(api, db):
    first = make_user("li.lei@gmail.com")
    alias = make_user("Li.Lei+2@googlemail.com", verified=False)

    response = _verify_api(api, verification_token(alias))

    assert response.status_code == 200
    body = response.json()
    assert (body["email_verified"], body["trial"]) == (
        True,
        {"status": "not_eligible", "amount_fen": 0},
    )
    assert NO_TRIAL in body["detail"]
    assert _trials() == [("li.lei@gmail.com", "trial:lilei@gmail.com", 1000)]
    assert (_promo(first), _promo(alias)) == (1000, 0)
    alias.refresh_from_db()
    assert alias.email_verified_at is not None
    assert trial_state(alias).status == TrialStatus.NOT_ELIGIBLE


def test_an_alias_on_the_console_is_told_why_too(client, db):
    make_user("wang.fang@gmail.com")
    alias = make_user("wangfang@gmail.com", verified=False)
    client.force_login(alias)

    done = client.post(reverse("accounts:verify_email", args=[verification_token(alias)]))

    assert NO_TRIAL in client.get(done.url).content.decode()
    assert _promo(alias) == 0


def test_me_shows_the_verification_and_the_trial(client_for, db):
    unverified, verified = make_user(verified=False), make_user()

    before = client_for(unverified).get("/api/v1/me").json()
    after = client_for(verified).get("/api/v1/me").json()

    assert (before["email_verified"], before["trial"]) == (
        False,
        {"status": "pending_verification", "amount_fen": 1000},
    )
    assert (after["email_verified"], after["trial"]) == (
        True,
        {"status": "granted", "amount_fen": 1000},
    )


@pytest.mark.parametrize(
    ("age", "works"), [(timedelta(days=3, minutes=-1), True), (timedelta(days=3, minutes=1), False)]
)
def test_a_link_works_for_email_verification_days(api, db, monkeypatch, settings, age, works):
    settings.EMAIL_VERIFICATION_DAYS = 3
    user = make_user(verified=False)
    made_at = timezone.now() - age
    with monkeypatch.context() as patch:
        patch.setattr(timezone, "now", lambda: made_at)
        token = verification_token(user)

    response = _verify_api(api, token)

    if works:
        assert response.status_code == 200
        assert _promo(user) == 1000
    else:
        assert response.status_code == 400
        assert response.json()["code"] == "link_expired"
        assert "expired" in response.json()["detail"]
        user.refresh_from_db()
        assert user.email_verified_at is None
        assert _trials() == []


def test_an_expired_link_on_the_console_says_so(client, db, monkeypatch):
    user = make_user(verified=False)
    made_at = timezone.now() - timedelta(days=4)
    with monkeypatch.context() as patch:
        patch.setattr(timezone, "now", lambda: made_at)
        path = reverse("accounts:verify_email", args=[verification_token(user)])

    page = client.post(path)

    assert page.status_code == 400
    assert "This verification link has expired" in page.content.decode()
    assert _trials() == []


@pytest.mark.parametrize(
    "garble",
    [lambda t: "not-a-token", lambda t: t[:-1] + ("B" if t.endswith("A") else "A"), lambda t: ""],
)
def test_a_forged_or_garbled_token_is_refused(api, db, garble):
    user = make_user(verified=False)

    response = _verify_api(api, garble(verification_token(user)))

    assert response.status_code == 400
    assert response.json()["code"] in {"invalid_link", "invalid"}
    user.refresh_from_db()
    assert user.email_verified_at is None


def test_a_link_for_an_address_changed_since_is_refused(api, db):
    user = make_user("old@lab.example", verified=False)
    token = verification_token(user)
    user_email_change(user=user, email="New.Name+x@Gmail.com")

    response = _verify_api(api, token)

    assert (response.status_code, response.json()["code"]) == (400, "invalid_link")
    user.refresh_from_db()
    assert (user.email, user.canonical_email) == ("new.name+x@gmail.com", "newname@gmail.com")
    assert user.email_verified_at is None


def test_api_resend_mails_a_link_and_is_throttled_per_account(
    client_for, db, settings, mailoutbox, django_capture_on_commit_callbacks
):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "verify_email_resend": "3/hour",
        },
    }
    user, other = make_user(verified=False), make_user(verified=False)
    client = client_for(user)

    with django_capture_on_commit_callbacks(execute=True):
        answers = [client.post("/api/v1/auth/verify-email/resend") for _ in range(4)]
        other_answer = client_for(other).post("/api/v1/auth/verify-email/resend")

    assert [a.status_code for a in answers] == [202, 202, 202, 429]
    assert answers[0].json() == {"sent_to": user.email, "expires_in_days": 3}
    assert other_answer.status_code == 202
    assert [m.to for m in mailoutbox] == [[user.email]] * 3 + [[other.email]]
    # each mailed link works (until one of them is used)
    done = client.post(
        "/api/v1/auth/verify-email",
        {"token": _link_path(mailoutbox[1]).split("/")[-2]},
        format="json",
    )
    assert done.status_code == 200


def test_api_resend_for_a_verified_address_is_refused(client_for, db, mailoutbox):
    response = client_for(make_user()).post("/api/v1/auth/verify-email/resend")

    assert (response.status_code, response.json()["code"]) == (409, "already_verified")
    assert mailoutbox == []


def test_the_dashboard_button_resends_the_link_and_is_throttled(
    client, db, settings, mailoutbox, django_capture_on_commit_callbacks
):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "verify_email_resend": "1/hour",
        },
    }
    user = make_user(verified=False)
    client.force_login(user)

    with django_capture_on_commit_callbacks(execute=True):
        first = client.post(reverse("accounts:verify_email_resend"), follow=True)
        second = client.post(reverse("accounts:verify_email_resend"), follow=True)

    assert f"A new link is on its way to {user.email}." in first.content.decode()
    assert "You have asked for several links already. Try again later." in (second.content.decode())
    assert len(mailoutbox) == 1


def test_a_mail_asked_for_before_verification_is_not_sent_after_it(db, mailoutbox):
    user = make_user()  # verified

    assert verification_email_send(user_id=user.id, language="en") is False
    assert mailoutbox == []


def test_an_unverified_account_can_top_up_and_order_with_paid_money(catalog):
    user = make_user(verified=False)

    instance = make_instance(user)  # tops the empty wallet up to an hour, then orders

    assert instance.status == "provisioning"
    assert _trials() == []
    user.refresh_from_db()
    assert user.email_verified_at is None


def test_without_required_verification_the_trial_comes_at_signup_once_per_canonical_address(
    db, settings, mailoutbox, django_capture_on_commit_callbacks
):
    settings.TRIAL_REQUIRES_VERIFICATION = False

    with django_capture_on_commit_callbacks(execute=True):
        first = user_signup(email="a.b@gmail.com", password=PASSWORD)
        alias = user_signup(email="ab+x@googlemail.com", password=PASSWORD)

    assert _trials() == [("a.b@gmail.com", "trial:ab@gmail.com", 1000)]
    assert mailoutbox == []  # nothing to verify for
    assert trial_state(first).status == TrialStatus.GRANTED
    assert trial_state(alias).status == TrialStatus.NOT_ELIGIBLE
    assert user_email_verify(user=alias).trial.status == TrialStatus.NOT_ELIGIBLE
    assert _promo(alias) == 0


def test_without_required_verification_the_console_welcome_states_the_credit_or_why_none(
    client, db, settings
):
    settings.TRIAL_REQUIRES_VERIFICATION = False
    signup = reverse("accounts:signup")

    first = client.post(signup, {"email": "zhao@me.com", "password": PASSWORD}, follow=True)
    client.logout()
    alias = client.post(signup, {"email": "zhao+2@icloud.com", "password": PASSWORD}, follow=True)

    assert "Welcome! ¥10.00 of trial credit is on your balance." in first.content.decode()
    assert "Welcome! No trial credit was added" in alias.content.decode()
    assert "Verify your e-mail to receive" not in alias.content.decode()
    assert _trials() == [("zhao@me.com", "trial:zhao@icloud.com", 1000)]


def test_an_alias_of_an_account_granted_under_the_old_key_gets_no_trial(db):
    old = make_user("wang@tsinghua.edu.cn", verified=False)
    # as the account stands after migration 0003: granted at sign-up by `trial:{user}`, verified
    ledger_post(
        wallet_id=old.tenant.wallet.id,
        key=f"trial:{old.id}",
        kind=TransactionKind.TRIAL,
        amount_fen=1000,
        description="Trial credit",
    )
    User.objects.filter(pk=old.pk).update(email_verified_at=old.date_joined)

    alias = make_user("wang+again@tsinghua.edu.cn")

    assert trial_state(alias).status == TrialStatus.NOT_ELIGIBLE
    assert _trials() == [("wang@tsinghua.edu.cn", f"trial:{old.id}", 1000)]


def test_operators_get_no_link_and_no_trial(db, mailoutbox, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        operator = make_operator()

    verification = user_email_verify(user=operator)

    assert mailoutbox == []
    assert verification.verified_now is True
    assert verification.trial.status == TrialStatus.NOT_ELIGIBLE
    assert verification.message == (
        "Your e-mail address is verified. Operator accounts receive no trial credit."
    )
    assert _trials() == []


def test_verifying_twice_grants_once(db):
    user = make_user(verified=False)

    first, second = user_email_verify(user=user), user_email_verify(user=user)

    assert (first.verified_now, second.verified_now) == (True, False)
    assert second.message == "Your e-mail address was already verified."
    assert _promo(user) == 1000
    assert len(_trials()) == 1


def test_accounts_of_one_mailbox_verifying_at_once_get_one_trial(transactional_db):
    emails = [
        "li.lei@gmail.com",
        "lilei+1@gmail.com",
        "L.I.Lei@googlemail.com",
        "lilei+x@gmail.com",
    ]
    users = [make_user(email, verified=False) for email in emails]

    results = run_threads(len(users), lambda i: user_email_verify(user=users[i]))

    statuses = sorted(r.trial.status for r in results)
    assert statuses == ["granted", "not_eligible", "not_eligible", "not_eligible"], results
    assert all(r.verified_now for r in results)
    assert LedgerTransaction.objects.filter(kind=TransactionKind.TRIAL).count() == 1
    assert sum(_promo(user) for user in users) == 1000
    assert User.objects.filter(email_verified_at__isnull=True).count() == 0


def test_the_migration_marks_existing_accounts_verified_with_their_canonical_address(db):
    user = make_user("A.B+old@GoogleMail.com", verified=False)
    User.objects.filter(pk=user.pk).update(canonical_email="", email_verified_at=None)
    migration = importlib.import_module(
        "starverse.accounts.migrations.0003_user_email_verification"
    )

    migration.backfill(apps, None)

    user.refresh_from_db()
    assert (user.canonical_email, user.email_verified_at) == ("ab@gmail.com", user.date_joined)


def test_admin_lists_the_verification_and_marks_verified_granting_the_trial(client, db):
    staff_login(client, make_operator())
    user = make_user("x.y+1@gmail.com", verified=False)
    alias = make_user("xy@googlemail.com", verified=False)
    changelist = reverse("admin:accounts_user_changelist")

    listing = client.get(changelist).content.decode()
    marked = client.post(
        changelist, {"action": "mark_verified", "_selected_action": [user.pk]}, follow=True
    )
    marked_alias = client.post(
        changelist, {"action": "mark_verified", "_selected_action": [alias.pk]}, follow=True
    )

    assert "xy@gmail.com" in listing  # the canonical address of both
    assert "Granted: x.y+1@gmail.com" in marked.content.decode()
    assert "Not eligible: xy@googlemail.com" in marked_alias.content.decode()
    assert _trials() == [("x.y+1@gmail.com", "trial:xy@gmail.com", 1000)]
    assert User.objects.filter(pk__in=[user.pk, alias.pk], email_verified_at=None).count() == 0


def test_admin_changing_an_address_recomputes_its_canonical_form(client, db):
    staff_login(client, make_operator())
    user = make_user("old@lab.example")

    saved = client.post(
        admin_change_url("accounts_user", user.pk),
        {"email": " New.Name+x@Gmail.com ", "is_active": "on"},
    )

    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert saved.url == reverse("admin:accounts_user_changelist")  # saved, not sent to log in
    user.refresh_from_db()
    assert (user.email, user.canonical_email) == ("new.name+x@gmail.com", "newname@gmail.com")
    assert user.email_verified_at is not None  # stays verified: no second trial to earn


def test_after_sign_up_the_dashboard_asks_for_the_verification_once(client, db):
    """The dashboard's banner asks to verify the address (with a button to send the link
    again): the welcome does not ask a second time there. Signing up on the way to another
    page, the welcome says it, since no banner will."""
    signup = reverse("accounts:signup")

    page = client.post(signup, {"email": "sun@lab.edu.cn", "password": PASSWORD}, follow=True)

    html = page.content.decode()
    assert page.request["PATH_INFO"] == reverse("console:dashboard")
    assert "We have sent a link" not in html  # the welcome said it again before
    assert "Welcome! Your account works already." in html
    assert html.count("Verify your e-mail to receive") == 1
    client.logout()
    elsewhere = client.post(
        f"{signup}?next=/billing/", {"email": "qian@lab.edu.cn", "password": PASSWORD}, follow=True
    )
    assert (
        "We have sent a link to qian@lab.edu.cn: verify your e-mail" in elsewhere.content.decode()
    )
