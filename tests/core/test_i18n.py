import os
import re
import subprocess
from pathlib import Path

from django.apps import apps
from django.utils import translation

from fleet.models import Node


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


def _messages_check(**env: str) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [str(root / "bin" / "messages"), "--check"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )


def test_the_check_fails_on_a_model_or_field_name_without_its_translation():
    """A new model's names and its field's are read from the models and must be translated
    like any string of the code (the admin shows them as headings, columns and filters)."""
    done = _messages_check(DJANGO_SETTINGS_MODULE="tests.core.untranslated.settings")

    assert done.returncode == 1
    listed = [line for line in done.stdout.splitlines() if line.startswith("msgid ")]
    assert listed == [
        'msgid "Untranslated"',
        'msgid "frobnicators"',
        'msgid "frobnicator"',
        'msgid "frobnication spin rate"',
    ]
    assert done.stderr.endswith("untranslated: 4 entries; run bin/messages and translate them\n")


def test_model_and_field_names_read_in_the_reader_language():
    fleet = apps.get_app_config("fleet")
    field = Node._meta.get_field("gpu_product")
    names = (fleet.verbose_name, Node._meta.verbose_name_plural, field.verbose_name)

    with translation.override("zh-hans"):
        assert [str(name) for name in names] == ["机群", "节点", "GPU 产品名"]
    with translation.override("en"):
        assert [str(name) for name in names] == ["Fleet", "nodes", "gpu product"]


def test_no_model_is_named_in_a_plural_django_derives_wrongly():
    """Django's derived plural adds an "s": "Stop policys", "Pod watchs" headed the admin. A
    model whose name needs another plural says it (Meta.verbose_name_plural)."""
    from starverse.core.modelwords import project_apps

    wrong = [
        f"{model._meta.label}: {model._meta.verbose_name_plural}"
        for app in project_apps()
        for model in app.get_models()
        if "verbose_name_plural" not in model._meta.original_attrs
        and re.search(r"([^aeiou]y|s|x|z|ch|sh)$", str(model._meta.verbose_name))
    ]
    assert wrong == []


def test_every_literal_a_template_translates_is_in_the_catalogue():
    """Every _('…') of a template reaches the catalogue, wherever it stands: xgettext reads
    templates as Python, and a call inside an attribute's quotes (data-confirm="{{ _('…') }}")
    was read as part of a string, so its confirmation showed in English in zh-Hans."""
    from django.utils.translation import trans_real

    catalogue = trans_real.translation("zh-hans")._catalog  # type: ignore[attr-defined]
    call = re.compile(r"""\b_\(\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')\s*[,)]""")
    missing = []
    for template in sorted(Path("templates").rglob("*.html")):
        for match in call.finditer(template.read_text(encoding="utf-8")):
            text = match.group(1) if match.group(1) is not None else match.group(2)
            text = text.replace('\\"', '"').replace("\\'", "'")
            if text not in catalogue or not catalogue[text]:
                missing.append(f"{template}: {text}")
    assert missing == []
