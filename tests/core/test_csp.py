"""Console pages carry a Content-Security-Policy that runs no inline script; no console page
relies on one."""

import re

import pytest

from starverse.core.csp import policy
from tests.factories import make_operator, make_user, staff_login

PAGES = [
    "/console/",
    "/console/rent/",
    "/console/instances/",
    "/console/disks/",
    "/console/datasets/",
    "/billing/",
    "/accounts/login/",
]
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>")


@pytest.mark.parametrize("path", PAGES)
def test_console_pages_forbid_inline_scripts_and_use_none(client, db, path):
    if path != "/accounts/login/":
        client.force_login(make_user())
    page = client.get(path)
    assert page.status_code == 200
    assert page["Content-Security-Policy"] == policy()
    assert (
        "script-src 'self'" in policy()
        and "unsafe-inline" not in policy().split("script-src")[1].split(";")[0]
    )
    assert INLINE_SCRIPT.findall(page.content.decode()) == []


def test_pages_may_connect_to_the_console_and_the_web_terminal_only(client, db, settings):
    settings.TERMINAL_URL = "wss://terminal.example.com"
    client.force_login(make_user())

    header = client.get("/console/")["Content-Security-Policy"]

    assert "connect-src 'self' wss://terminal.example.com;" in header


def test_the_admin_keeps_its_own_pages_unrestricted(client, db):
    staff_login(client, make_operator())  # the admin's log-in is the console's page now

    page = client.get("/admin/")

    assert page.status_code == 200
    assert "Content-Security-Policy" not in page


def test_forms_may_lead_to_the_payment_page_only(client, db, settings):
    """The top-up form's answer redirects to Stripe Checkout (or the stand-in), and Chromium
    holds that redirect to form-action: its origin is allowed, nothing else is."""
    client.force_login(make_user())
    settings.STRIPE_API_BASE = "http://127.0.0.1:12111/"
    page = client.get("/billing/")
    assert (
        "form-action 'self' https://checkout.stripe.com http://127.0.0.1:12111;"
        in (page["Content-Security-Policy"])
    )
    settings.STRIPE_API_BASE = ""  # live Stripe
    assert "form-action 'self' https://checkout.stripe.com;" in policy()
