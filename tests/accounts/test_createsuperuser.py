import pytest
from django.core.management import CommandError, call_command

from billing.models import LedgerTransaction, Wallet
from starverse.accounts.models import Tenant, User
from tests.factories import PASSWORD


def test_noinput_creates_an_operator_with_a_wallet_and_no_trial_credit(db, monkeypatch, capsys):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", PASSWORD)

    call_command("createsuperuser", "--noinput", "--email", " Ops@Starverse.Example ")

    user = User.objects.get()
    assert (user.email, user.is_staff, user.is_superuser) == ("ops@starverse.example", True, True)
    assert user.check_password(PASSWORD)
    wallet = Wallet.objects.get(tenant=user.tenant)
    assert (wallet.cash_fen, wallet.promo_fen) == (0, 0)
    assert LedgerTransaction.objects.count() == 0
    assert capsys.readouterr().out == "Superuser created successfully.\n"


def test_noinput_reads_the_address_from_the_environment(db, monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_EMAIL", "ops@starverse.example")
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", PASSWORD)

    call_command("createsuperuser", "--noinput", verbosity=0)

    assert list(User.objects.values_list("email", "is_superuser")) == [
        ("ops@starverse.example", True)
    ]


@pytest.mark.parametrize(
    ("email", "password", "message"),
    [
        (None, PASSWORD, "You must use --email with --noinput."),
        ("ops@starverse.example", None, "Set DJANGO_SUPERUSER_PASSWORD with --noinput."),
        ("ops@starverse.example", "123", "This password is too short"),
        ("not-an-address", PASSWORD, "Enter a valid e-mail address."),
    ],
)
def test_noinput_refusals_create_nothing(db, monkeypatch, email, password, message):
    monkeypatch.delenv("DJANGO_SUPERUSER_EMAIL", raising=False)
    monkeypatch.delenv("DJANGO_SUPERUSER_PASSWORD", raising=False)
    if password is not None:
        monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", password)
    args = ["--email", email] if email else []

    with pytest.raises(CommandError, match=message):
        call_command("createsuperuser", "--noinput", *args)

    assert (User.objects.count(), Tenant.objects.count(), Wallet.objects.count()) == (0, 0, 0)


def test_a_taken_address_is_refused(db, monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", PASSWORD)
    call_command("createsuperuser", "--noinput", "--email", "ops@starverse.example", verbosity=0)

    with pytest.raises(CommandError, match="already exists"):
        call_command("createsuperuser", "--noinput", "--email", "OPS@starverse.example")

    assert User.objects.count() == 1


def test_interactive_asks_again_until_the_passwords_match(db, monkeypatch, capsys):
    answers = iter(["wrong", PASSWORD, "  ", "  ", PASSWORD, PASSWORD])
    monkeypatch.setattr("builtins.input", lambda prompt: "ops@starverse.example")
    monkeypatch.setattr("getpass.getpass", lambda prompt="Password: ": next(answers))

    call_command("createsuperuser")

    assert User.objects.get().email == "ops@starverse.example"
    assert capsys.readouterr().err == (
        "Error: Your passwords didn't match.\nError: Blank passwords aren't allowed.\n"
    )
