"""Settings that keep the platform up when an outside service misbehaves."""

import runpy
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

import starverse.settings.base

BASE = Path(starverse.settings.base.__file__)


def test_database_connections_are_health_checked_before_reuse():
    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True


def test_the_database_is_the_embedded_postgresql_unless_database_url_says(monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("EMBEDDED_PG_PORT", "15499")
    database = runpy.run_path(str(BASE))["DATABASES"]["default"]
    assert (database["ENGINE"], database["HOST"], database["PORT"], database["NAME"]) == (
        "django.db.backends.postgresql",
        "127.0.0.1",
        15499,
        "starverse",
    )
    assert (database["USER"], database["OPTIONS"]) == ("postgres", {"connect_timeout": 5})

    monkeypatch.setenv("DATABASE_URL", "postgres://app@db.example:5433/prod")
    database = runpy.run_path(str(BASE))["DATABASES"]["default"]
    assert (database["HOST"], database["PORT"], database["NAME"]) == ("db.example", 5433, "prod")


def test_a_database_other_than_postgresql_is_refused(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "sqlite:///var/starverse.sqlite3")
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL must be a PostgreSQL URL"):
        runpy.run_path(str(BASE))


def test_email_has_a_timeout_of_10_seconds_by_default(monkeypatch):
    monkeypatch.delenv("EMAIL_TIMEOUT", raising=False)

    assert settings.EMAIL_TIMEOUT == 10
    assert runpy.run_path(str(BASE))["EMAIL_TIMEOUT"] == 10


def test_email_timeout_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("EMAIL_TIMEOUT", "3")
    assert runpy.run_path(str(BASE))["EMAIL_TIMEOUT"] == 3

    monkeypatch.setenv("EMAIL_TIMEOUT", "soon")
    with pytest.raises(ImproperlyConfigured, match="EMAIL_TIMEOUT must be an integer"):
        runpy.run_path(str(BASE))


def test_kube_access_is_true_false_or_exec(monkeypatch):
    for raw, read in (("true", True), ("false", False), ("exec", "exec"), (" EXEC ", "exec")):
        monkeypatch.setenv("KUBE_ACCESS", raw)
        assert runpy.run_path(str(BASE))["KUBE_ACCESS"] == read

    monkeypatch.setenv("KUBE_ACCESS", "shell")
    with pytest.raises(ImproperlyConfigured, match="KUBE_ACCESS must be true, false or exec"):
        runpy.run_path(str(BASE))


def test_the_terminal_is_reached_at_the_consoles_address_unless_told(monkeypatch):
    monkeypatch.delenv("TERMINAL_URL", raising=False)
    monkeypatch.setenv("PUBLIC_BASE_URL", "https://console.example.com/")
    assert runpy.run_path(str(BASE))["TERMINAL_URL"] == "wss://console.example.com"
    monkeypatch.setenv("PUBLIC_BASE_URL", "http://127.0.0.1:8000")
    assert runpy.run_path(str(BASE))["TERMINAL_URL"] == "ws://127.0.0.1:8000"

    monkeypatch.setenv("TERMINAL_URL", "ws://127.0.0.1:8001/")
    assert runpy.run_path(str(BASE))["TERMINAL_URL"] == "ws://127.0.0.1:8001"
    monkeypatch.setenv("TERMINAL_URL", "https://console.example.com/terminal")
    with pytest.raises(ImproperlyConfigured, match="TERMINAL_URL must be ws://"):
        runpy.run_path(str(BASE))


def test_make_run_shows_the_consoles_own_error_pages_and_serves_static_files(monkeypatch):
    """starverse.settings.dev (make run) runs with DEBUG off unless DEBUG=1: Django's technical
    404 page (every route listed) is what DEBUG shows instead of templates/404.html."""
    monkeypatch.delenv("DEBUG", raising=False)
    monkeypatch.delenv("DEV_AUTORELOAD", raising=False)
    dev = runpy.run_path(str(BASE.with_name("dev.py")))
    assert dev["DEBUG"] is False
    assert (dev["WHITENOISE_USE_FINDERS"], dev["WHITENOISE_AUTOREFRESH"]) == (True, True)
    assert dev["TEMPLATES"][0]["OPTIONS"]["auto_reload"] is True
    assert dev["METRICS_ALLOWED_CIDRS"] == ["127.0.0.1/32", "::1/128"]
    assert dev["DEV_PODS_WITHOUT_SSHD"] is False
    options = settings.TEMPLATES[0]["OPTIONS"]
    assert isinstance(options, dict) and "auto_reload" not in options  # a copy was changed

    monkeypatch.setenv("DEBUG", "1")
    assert runpy.run_path(str(BASE.with_name("dev.py")))["DEBUG"] is True
    # make load: templates and files read once, as production serves them
    monkeypatch.setenv("DEV_AUTORELOAD", "0")
    once = runpy.run_path(str(BASE.with_name("dev.py")))
    assert (once["WHITENOISE_AUTOREFRESH"], once["TEMPLATES"][0]["OPTIONS"]["auto_reload"]) == (
        False,
        False,
    )
