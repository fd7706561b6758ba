import pytest
from django.urls import reverse

from billing.choices import TransactionKind
from billing.models import LedgerTransaction, Wallet
from billing.onboarding import user_signup
from starverse.accounts.models import User
from starverse.core.errors import Conflict
from tests.conftest import run_threads
from tests.factories import PASSWORD


def _trial_rows(user: User) -> list[LedgerTransaction]:
    return list(
        LedgerTransaction.objects.filter(wallet__tenant=user.tenant, kind=TransactionKind.TRIAL)
    )


def test_api_signup_opens_the_account_without_the_trial_and_mails_a_link(
    api, db, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            "/api/v1/auth/signup",
            {"email": "  Li.Lei@PKU.edu.cn ", "password": PASSWORD},
            format="json",
        )

    assert response.status_code == 201
    body = response.json()
    assert body["user"]["email"] == "li.lei@pku.edu.cn"
    assert body["user"]["id"].startswith("usr_")
    assert body["token"].startswith("sv_")
    assert body["email_verified"] is False
    assert body["trial"] == {"status": "pending_verification", "amount_fen": 1000}
    me = api.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {body['token']}").json()
    assert me["balance"] == {"cash_fen": 0, "promo_fen": 0, "pending_fen": 0, "total_fen": 0}
    assert (me["email_verified"], me["trial"]["status"]) == (False, "pending_verification")
    user = User.objects.get()
    assert (user.canonical_email, user.email_verified_at) == ("li.lei@pku.edu.cn", None)
    assert _trial_rows(user) == []
    assert [m.to for m in mailoutbox] == [["li.lei@pku.edu.cn"]]
    assert "/accounts/verify-email/" in mailoutbox[0].body


def test_api_signup_of_a_taken_address_is_refused_and_grants_nothing(api, db):
    api.post("/api/v1/auth/signup", {"email": "a@lab.cn", "password": PASSWORD}, format="json")

    again = api.post(
        "/api/v1/auth/signup", {"email": " A@LAB.CN", "password": PASSWORD}, format="json"
    )

    assert again.status_code == 409
    assert again.json()["code"] == "email_taken"
    assert User.objects.count() == 1
    assert LedgerTransaction.objects.count() == 0


def test_form_signup_logs_in_without_the_trial_and_asks_to_verify(client, db):
    response = client.post(
        reverse("accounts:signup"), {"email": "Form@Lab.cn", "password": PASSWORD}
    )

    assert response.status_code == 302
    assert response.url == reverse("console:dashboard")
    user = User.objects.get(email="form@lab.cn")
    assert Wallet.objects.get(tenant=user.tenant).promo_fen == 0
    assert _trial_rows(user) == []
    dashboard = client.get(reverse("console:dashboard"))
    assert dashboard.status_code == 200
    html = dashboard.content.decode()
    # asked once, by the dashboard's banner (the welcome asked a second time: issue 26)
    assert "verify your e-mail to receive your ¥10.00 trial credit" not in html
    assert html.count("Verify your e-mail to receive your ¥10.00 trial credit") == 1
    assert reverse("accounts:verify_email_resend") in html


@pytest.mark.parametrize(
    ("required", "promise"),
    [
        (True, "¥10 trial credit when you verify your e-mail"),
        (False, "¥10 trial credit on sign-up"),
    ],
)
def test_the_signup_page_promises_the_trial_as_it_comes(client, db, settings, required, promise):
    settings.TRIAL_REQUIRES_VERIFICATION = required

    assert promise in client.get(reverse("accounts:signup")).content.decode()


def test_form_signup_with_weak_password_writes_nothing(client, db):
    response = client.post(
        reverse("accounts:signup"), {"email": "weak@lab.cn", "password": "12345678"}
    )

    assert response.status_code == 400
    assert "too short" in response.content.decode() or "too common" in response.content.decode()
    assert User.objects.count() == 0
    assert Wallet.objects.count() == 0


def test_twelve_concurrent_signups_of_one_address_make_one_account_and_one_link(
    transactional_db, mailoutbox
):
    variants = [
        "wang@tsinghua.edu.cn",
        " WANG@tsinghua.edu.cn",
        "Wang@Tsinghua.edu.cn ",
        "wang@TSINGHUA.EDU.CN",
        "  wang@tsinghua.edu.cn  ",
        "WaNg@tsinghua.edu.cn",
    ] * 2

    results = run_threads(12, lambda i: user_signup(email=variants[i], password=PASSWORD))

    created = [r for r in results if isinstance(r, User)]
    refused = [r for r in results if isinstance(r, Conflict)]
    assert len(created) == 1, results
    assert len(refused) == 11, results
    assert User.objects.count() == 1
    assert Wallet.objects.count() == 1
    assert LedgerTransaction.objects.filter(kind=TransactionKind.TRIAL).count() == 0
    assert len(mailoutbox) == 1  # one verification link, for the one account


def test_signups_are_throttled_per_client_address(api, db, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "signup": "3/hour",
        },
    }

    codes = [
        api.post(
            "/api/v1/auth/signup",
            {"email": f"t{i}@lab.cn", "password": PASSWORD},
            format="json",
            REMOTE_ADDR="10.9.8.7",
        ).status_code
        for i in range(4)
    ]
    other_address = api.post(
        "/api/v1/auth/signup",
        {"email": "t9@lab.cn", "password": PASSWORD},
        format="json",
        REMOTE_ADDR="10.9.8.8",
    )

    assert codes == [201, 201, 201, 429]
    assert other_address.status_code == 201
    assert User.objects.count() == 4


def test_form_signup_shares_the_throttle(client, db, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "signup": "1/hour",
        },
    }
    client.post(reverse("accounts:signup"), {"email": "f1@lab.cn", "password": PASSWORD})
    client.logout()

    second = client.post(reverse("accounts:signup"), {"email": "f2@lab.cn", "password": PASSWORD})

    assert second.status_code == 400
    assert "Too many sign-ups" in second.content.decode()
    assert list(User.objects.values_list("email", flat=True)) == ["f1@lab.cn"]


def test_login_logout_and_password_reset_by_email(client, user, mailoutbox):
    assert (
        client.post(
            reverse("accounts:login"), {"username": user.email.upper(), "password": PASSWORD}
        ).status_code
        == 302
    )
    assert client.get(reverse("console:dashboard")).status_code == 200
    client.post(reverse("accounts:logout"))
    assert client.get(reverse("console:dashboard")).status_code == 302

    client.post(reverse("accounts:password_reset"), {"email": user.email})

    assert len(mailoutbox) == 1
    link = next(line for line in mailoutbox[0].body.splitlines() if "/password-reset/" in line)
    path = link[link.index("/accounts/") :].strip()
    form_page = client.get(path, follow=True)
    assert form_page.status_code == 200
    done = client.post(
        form_page.redirect_chain[-1][0],
        {"new_password1": "another long passphrase", "new_password2": "another long passphrase"},
    )
    assert done.status_code == 302
    user.refresh_from_db()
    assert user.check_password("another long passphrase")
