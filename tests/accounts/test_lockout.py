from django.test import Client
from django.urls import reverse

from tests.factories import PASSWORD, make_operator, make_user

LOCKED = "Too many failed attempts for this account"


def _login(client, email, password, url=None):
    return client.post(url or reverse("accounts:login"), {"username": email, "password": password})


def test_sixty_wrong_passwords_only_ten_are_checked(db):
    user = make_user()
    client = Client()

    answers = [_login(client, user.email, "wrong password!") for _ in range(60)]

    checked = [r for r in answers if r.status_code == 200]
    refused = [r for r in answers if r.status_code == 429]
    assert len(checked) == 10
    assert len(refused) == 50
    assert LOCKED in refused[-1].content.decode()
    assert "15 minutes" in refused[0].content.decode()
    assert "reset your password" in refused[0].content.decode()
    # the right password is refused too while locked, from any address
    again = Client(REMOTE_ADDR="10.9.9.9")
    assert _login(again, user.email, PASSWORD).status_code == 429


def test_a_successful_login_resets_the_account_count(db, settings):
    user = make_user()
    client = Client()
    for _ in range(9):
        _login(client, user.email, "wrong password!")
    assert _login(client, user.email, PASSWORD).status_code == 302
    client.logout()

    for _ in range(9):
        assert _login(client, user.email, "wrong password!").status_code == 200
    assert _login(client, user.email, PASSWORD).status_code == 302


def test_one_address_trying_many_accounts_is_locked_out(db):
    client = Client(REMOTE_ADDR="10.1.2.3")
    answers = [_login(client, f"nobody{i}@lab.cn", "wrong password!") for i in range(31)]

    assert [r.status_code for r in answers[:30]] == [200] * 30
    assert answers[30].status_code == 429
    assert "from your network" in answers[30].content.decode()
    # another address is unaffected
    other = make_user()
    assert _login(Client(REMOTE_ADDR="10.1.2.4"), other.email, PASSWORD).status_code == 302


def test_admin_login_is_the_consoles_so_it_is_locked_out_too(db):
    operator = make_operator()
    client = Client()

    admin_login = client.get("/admin/", follow=True)
    assert admin_login.redirect_chain == [
        ("/admin/login/?next=/admin/", 302),
        ("/accounts/login/?next=/admin/", 302),
    ]
    for _ in range(10):
        response = _login(client, operator.email, "wrong password!")
        assert LOCKED not in response.content.decode()

    locked = _login(client, operator.email, PASSWORD)

    assert locked.status_code == 429
    assert LOCKED in locked.content.decode()
    assert not client.get("/admin/").wsgi_request.user.is_authenticated


def test_password_reset_requests_are_throttled_without_revealing_the_account(db, mailoutbox):
    user = make_user()
    client = Client(REMOTE_ADDR="10.5.5.5")
    url = reverse("accounts:password_reset")

    known = [client.post(url, {"email": user.email}) for _ in range(5)]
    unknown = [client.post(url, {"email": "ghost@lab.cn"}) for _ in range(5)]

    # the same answer for both, and at most three mails for the account
    assert [r.status_code for r in known] == [302] * 5
    assert [r.status_code for r in unknown] == [302] * 5
    assert len(mailoutbox) == 3

    # the address has had its ten: the eleventh is refused, for any e-mail
    refused = client.post(url, {"email": "someone@lab.cn"})
    assert refused.status_code == 429
    assert "Too many password-reset requests" in refused.content.decode()
