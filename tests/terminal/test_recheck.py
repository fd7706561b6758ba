"""An open terminal does not outlive what let it open: a log-out, a new password, a
deactivation in the admin, an operator's reset of the second factor end it at once (4401), a
removal from the team whose instance it is ends it at once (4404), and what changed with no
notice at all (a session deleted from the database, an instance stopped) ends it at the next
periodic check (TERMINAL_RECHECK_S). Each end is in the instance's timeline."""

from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.sessions.models import Session
from django.test import Client

from instances.models import Instance
from starverse.accounts.services import user_password_set
from starverse.accounts.twofactor import totp_reset
from teams.services import membership_remove
from tests.factories import enrol_totp, make_instance, make_operator, make_user, staff_login
from tests.teams.test_team_changes import acting
from tests.teams.test_teams import fund_team, join
from tests.terminal.test_terminal import _ended, _open

SESSION_ENDED = {
    "type": "notice",
    "level": "error",
    "text": "Your console session has ended. Log in to the console again, then reconnect.",
}
REASON = " s (the console session ended or access to the instance was withdrawn)."


@pytest.fixture
def running(transactional_db, catalog, settings) -> tuple[Any, Instance]:
    user = make_user()
    instance = make_instance(user, status="running")
    settings.KUBE_ACCESS = "exec"  # what the terminal service runs with
    settings.TERMINAL_RECHECK_S = 3600  # only a notice may end these sessions in time
    return user, instance


def _signed_in(user: Any) -> tuple[Client, str]:
    client = Client()
    client.force_login(user)
    return client, f"sessionid={client.cookies['sessionid'].value}"


def _ends_with(browser: Any, code: int, notice: dict[str, str]) -> None:
    assert browser.closed(timeout=5) == code
    assert browser.messages[-1] == notice


def test_logging_out_ends_the_open_terminal_at_once(running, cluster, terminal_service):
    user, instance = running
    client, cookie = _signed_in(user)

    with _open(terminal_service, instance.id, cookie) as browser:
        browser.until("# ")
        assert client.post("/accounts/logout/").status_code == 302
        _ends_with(browser, 4401, SESSION_ENDED)

    assert _ended(instance).endswith(REASON)


def test_a_new_password_ends_it(running, cluster, terminal_service):
    user, instance = running
    _client, cookie = _signed_in(user)

    with _open(terminal_service, instance.id, cookie) as browser:
        browser.until("# ")
        user_password_set(user=user, password="a whole new passphrase", revoke_tokens=False)
        _ends_with(browser, 4401, SESSION_ENDED)


def test_a_deactivation_in_the_admin_ends_it(running, cluster, terminal_service):
    user, instance = running
    _client, cookie = _signed_in(user)
    admin = Client()
    operator = make_operator()
    enrol_totp(operator)
    staff_login(admin, operator)
    page = admin.get(f"/admin/accounts/user/{quote(user.pk)}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() or "" for name in form.fields if name != "is_active"}
    data.update({"is_active": "", "groups": [], "user_permissions": []})

    with _open(terminal_service, instance.id, cookie) as browser:
        browser.until("# ")
        saved = admin.post(f"/admin/accounts/user/{quote(user.pk)}/change/", data)
        assert saved.status_code == 302, saved.content[:2000]
        _ends_with(browser, 4401, SESSION_ENDED)


def test_an_operators_reset_of_the_second_factor_ends_it(running, cluster, terminal_service):
    user, instance = running
    enrol_totp(user)
    _client, cookie = _signed_in(user)

    with _open(terminal_service, instance.id, cookie) as browser:
        browser.until("# ")
        totp_reset(user=user, operator=make_operator(), reason="lost phone, ID checked")
        _ends_with(browser, 4401, SESSION_ENDED)


def test_a_member_removed_from_the_team_loses_the_teams_terminal(
    transactional_db, catalog, cluster, terminal_service, settings
):
    from billing.onboarding import team_create

    settings.TERMINAL_RECHECK_S = 3600
    owner, ana = make_user(), make_user()
    team = team_create(user=owner, name="Vision lab")
    join(team, owner, ana)
    fund_team(team, 1_000_000)
    instance = make_instance(acting(ana, team, "member"), status="running")
    ana.refresh_from_db()
    _client, cookie = _signed_in(ana)
    settings.KUBE_ACCESS = "exec"

    with _open(terminal_service, instance.id, cookie) as browser:
        browser.until("# ")
        settings.KUBE_ACCESS = "true"  # the worker's share of it (her keys leave the Secret)
        membership_remove(actor=owner, team=team, user_id=ana.pk)
        settings.KUBE_ACCESS = "exec"
        _ends_with(
            browser,
            4404,
            {
                "type": "notice",
                "level": "error",
                "text": "You no longer have access to this instance.",
            },
        )


def test_what_changed_without_a_notice_is_caught_by_the_periodic_check(
    running, cluster, terminal_service, settings
):
    user, instance = running
    settings.TERMINAL_RECHECK_S = 0.2
    _client, cookie = _signed_in(user)
    _other, second = _signed_in(user)

    with _open(terminal_service, instance.id, cookie) as browser:
        browser.until("# ")
        Session.objects.filter(session_key=cookie.split("=", 1)[1]).delete()
        _ends_with(browser, 4401, SESSION_ENDED)

    with _open(terminal_service, instance.id, second) as browser:
        browser.until("# ")
        Instance.objects.filter(pk=instance.pk).update(status="stopped")
        _ends_with(
            browser,
            4409,
            {
                "type": "notice",
                "level": "error",
                "text": "This instance is stopped: start it to open a terminal.",
            },
        )
