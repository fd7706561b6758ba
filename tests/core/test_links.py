"""Every link the platform mails (password reset, e-mail verification, team invitations, money
and instance notices) is built from PUBLIC_BASE_URL through one helper
(starverse.core.links.public_url), never from the Host a request came with: a reset asked
with `Host: <another allowed name>` still links to the console's own address."""

import re
from pathlib import Path

from django.core import mail
from django.template import engines
from django.test import Client
from jinja2 import meta

from billing.choices import TransactionKind
from billing.models import Wallet
from billing.notices import runway_notices_check
from billing.onboarding import team_create
from billing.services import ledger_post
from starverse.accounts.teams import invitation_create, invitation_email_send
from starverse.accounts.verification import verification_email_send
from tests.factories import make_user

CONSOLE = "https://console.example.com"
TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def _links(message) -> list[str]:
    return re.findall(r"https?://[^\s)]+", message.body)


def test_a_reset_asked_at_another_host_links_to_the_console(db, settings):
    settings.PUBLIC_BASE_URL = CONSOLE + "/"
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "intranet.lab.example.edu.cn"]
    user = make_user()

    sent = Client().post(
        "/accounts/password-reset/", {"email": user.email}, HTTP_HOST="intranet.lab.example.edu.cn"
    )

    assert sent.status_code == 302
    (link,) = _links(mail.outbox[-1])
    assert re.fullmatch(rf"{CONSOLE}/accounts/password-reset/[^/]+/[^/]+/", link), link


def test_every_mailed_link_starts_at_the_consoles_address(
    db, settings, django_capture_on_commit_callbacks
):
    settings.PUBLIC_BASE_URL = CONSOLE + "/"
    owner = make_user(verified=False)
    wallet = Wallet.objects.get(tenant=owner.tenant)
    ledger_post(
        wallet_id=wallet.id,
        key="topup:l",
        kind=TransactionKind.TOPUP,
        amount_fen=600,
        description="t",
    )
    team = team_create(user=make_user(), name="NLP lab")
    invited = invitation_create(
        actor=team.memberships.get().user, team=team, email="new@lab.cn", role="member"
    )

    invitation_email_send(invitation_id=invited.id, language="en")
    verification_email_send(user_id=owner.id, language="en")
    with django_capture_on_commit_callbacks(execute=True):  # the balance.low event's mail
        runway_notices_check({owner.tenant_id: 6_000})

    links = [link for message in mail.outbox for link in _links(message)]
    assert len(mail.outbox) == 3 and len(links) >= 4
    assert [link for link in links if not link.startswith(CONSOLE + "/")] == []
    assert [link for link in links if "//" in link.removeprefix("https://")] == []


def test_no_mailed_template_reads_the_requests_host():
    """Django's reset form offers `protocol` and `domain`, read from the request's Host."""
    env = engines["jinja2"].env  # type: ignore[attr-defined]
    mailed = list(TEMPLATES.rglob("*.txt"))
    assert len(mailed) >= 10
    for path in mailed:
        names = meta.find_undeclared_variables(env.parse(path.read_text()))
        assert not names & {"protocol", "domain", "request", "site_name"}, path
