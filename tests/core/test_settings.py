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
