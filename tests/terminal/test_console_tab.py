"""The Terminal tab of an instance's page: the owner's page carries the terminal (its scripts
from the console's own static files, no inline script) and the service's address; another
tenant's instance is a 404; the Overview tab leads to it."""

from starverse.core.csp import policy
from tests.core.test_csp import INLINE_SCRIPT
from tests.factories import make_instance, make_user


def test_the_owner_gets_a_terminal_tab(catalog, client, settings):
    settings.TERMINAL_URL = "wss://console.example.com"
    user = make_user()
    instance = make_instance(user, status="running")
    client.force_login(user)

    overview = client.get(f"/console/instances/{instance.id}/").content.decode()
    page = client.get(f"/console/instances/{instance.id}/terminal/")

    assert f'href="/console/instances/{instance.id}/terminal/"' in overview
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-url="wss://console.example.com/terminal/{instance.id}/ws"' in html
    for script in ("vendor/xterm/xterm.js", "vendor/xterm/addon-fit.js", "js/terminal.js"):
        assert f'<script src="/static/{script}" defer></script>' in html
    assert '<link rel="stylesheet" href="/static/vendor/xterm/xterm.css">' in html
    assert INLINE_SCRIPT.findall(html) == []
    assert page["Content-Security-Policy"] == policy()
    assert "connect-src 'self' wss://console.example.com;" in policy()


def test_another_tenants_terminal_tab_is_not_found(catalog, client):
    instance = make_instance(make_user())
    client.force_login(make_user())

    assert client.get(f"/console/instances/{instance.id}/terminal/").status_code == 404
    assert client.get("/console/instances/ins_missing/terminal/").status_code == 404


def test_the_terminal_tab_needs_a_log_in(catalog, client):
    instance = make_instance(make_user())

    answer = client.get(f"/console/instances/{instance.id}/terminal/")

    assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")
