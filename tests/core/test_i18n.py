import subprocess
from pathlib import Path

from django.utils import translation


def _zh(text: str) -> str:
    with translation.override("zh-hans"):
        return translation.gettext(text)


def test_accept_language_chooses_simplified_chinese(client, db):
    expected = _zh("Log in")
    assert expected != "Log in", "the zh-Hans catalogue lacks 'Log in'"

    zh = client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9,en;q=0.5")
    en = client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE="en-US,en;q=0.9")

    assert expected in zh.content.decode()
    assert 'lang="zh-hans"' in zh.content.decode()
    assert expected not in en.content.decode()


def test_language_switch_persists(client, user):
    client.force_login(user)

    client.post(
        "/i18n/setlang/", {"language": "zh-hans", "next": "/billing/"}, HTTP_ACCEPT_LANGUAGE="en"
    )
    page = client.get("/billing/", HTTP_ACCEPT_LANGUAGE="en")

    assert _zh("Billing") in page.content.decode()
    assert _zh("Trial credit") in page.content.decode()


def test_api_errors_follow_the_language(api, db):
    response = api.post(
        "/api/v1/auth/signup",
        {"email": "bad", "password": "correct horse battery"},
        format="json",
        HTTP_ACCEPT_LANGUAGE="zh-Hans",
    )

    assert response.status_code == 400
    assert _zh("Enter a valid e-mail address.") in response.json()["detail"]
    assert _zh("Enter a valid e-mail address.") != "Enter a valid e-mail address."


def test_every_string_in_the_code_has_a_chinese_translation():
    """Extracts the catalogue from the sources and templates (xgettext, as `make messages`
    does) and fails while any string lacks its zh-Hans translation."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [str(root / "bin" / "messages"), "--check"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
