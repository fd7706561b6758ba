"""Which pages may open a terminal (a root shell in the visitor's instance): the console's own
origin (PUBLIC_BASE_URL) and the exact origins TERMINAL_ALLOWED_ORIGINS names, nothing else:
not the hosts ALLOWED_HOSTS lets in (its `.GATEWAY_DOMAIN` serves tenants' pages), not a
CSRF_TRUSTED_ORIGINS pattern (cross-site WebSocket hijacking)."""

import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

import starverse.settings.base
from terminal.access import origin_allowed

BASE = Path(starverse.settings.base.__file__)


def test_only_the_consoles_own_origin_and_the_listed_ones_may_open_a_terminal(settings):
    settings.PUBLIC_BASE_URL = "https://console.example.com/"
    settings.TERMINAL_ALLOWED_ORIGINS = ["https://ops.example.net:8443"]
    settings.GATEWAY_DOMAIN = "gw.example.com"
    settings.ALLOWED_HOSTS = ["console.example.com", ".gw.example.com"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://*.example.com"]

    allowed = [
        "https://console.example.com",
        "https://CONSOLE.example.com",
        "https://console.example.com:443",
        "https://ops.example.net:8443",
    ]
    refused = [
        "https://ins-abcdefghijklmnopqrst-8888.gw.example.com",  # a tenant's page
        "https://gw.example.com",
        "https://other.example.com",  # a CSRF_TRUSTED_ORIGINS pattern names no terminal page
        "https://console.example.com.evil.example",
        "https://evil.example",
        "http://console.example.com",  # the console is https only
        "https://ops.example.net",
        "http://[::1",
        "null",
        "file://",
        "",
        None,
    ]
    assert [o for o in allowed if origin_allowed(o)] == allowed
    assert [o for o in refused if origin_allowed(o)] == []


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("https://*.example.net", "TERMINAL_ALLOWED_ORIGINS must list origins"),
        ("https://ops.example.net/console", "TERMINAL_ALLOWED_ORIGINS must list origins"),
        ("ops.example.net", "TERMINAL_ALLOWED_ORIGINS must list origins"),
        ("https://ins-x-8888.gw.example.com", "is on GATEWAY_DOMAIN"),
    ],
)
def test_the_listed_origins_are_exact_and_off_the_gateway(monkeypatch, entry, error):
    monkeypatch.setenv("GATEWAY_DOMAIN", "gw.example.com")
    monkeypatch.setenv("TERMINAL_ALLOWED_ORIGINS", f"https://ops.example.net,{entry}")

    with pytest.raises(ImproperlyConfigured, match=error):
        runpy.run_path(str(BASE))


def test_a_console_on_the_gateways_domain_is_refused(monkeypatch):
    monkeypatch.delenv("TERMINAL_ALLOWED_ORIGINS", raising=False)
    monkeypatch.setenv("GATEWAY_DOMAIN", "gw.example.com")
    monkeypatch.setenv("PUBLIC_BASE_URL", "https://console.gw.example.com")

    with pytest.raises(ImproperlyConfigured, match=r"PUBLIC_BASE_URL .* is on GATEWAY_DOMAIN"):
        runpy.run_path(str(BASE))

    monkeypatch.setenv("PUBLIC_BASE_URL", "https://console.example.com")
    monkeypatch.setenv("TERMINAL_ALLOWED_ORIGINS", "https://OPS.example.net:443/")
    assert runpy.run_path(str(BASE))["TERMINAL_ALLOWED_ORIGINS"] == ["https://ops.example.net"]
