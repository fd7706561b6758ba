"""A password-reset or e-mail verification link's token never reaches the access log."""

import datetime as dt
import logging
from types import SimpleNamespace

from gunicorn.config import Config

from starverse.access_log import AccessLog, RedactUrlSecrets

TOKEN_PATH = "/accounts/password-reset/MTIz/cq1x4b-8d4f6a3b9e2c1d0f7a6b5c4d3e2f1a0b/"


def _logged(path: str, referer: str = "-") -> dict:
    environ = {
        "REQUEST_METHOD": "GET",
        "RAW_URI": path,
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_REFERER": referer,
        "REMOTE_ADDR": "203.0.113.9",
    }
    response = SimpleNamespace(status="302 Found", sent=0, headers=[])
    request = SimpleNamespace(headers=[("REFERER", referer)])
    return AccessLog(Config()).atoms(response, request, environ, dt.timedelta(milliseconds=3))


def test_the_reset_token_is_cut_from_the_request_line_path_and_referer():
    atoms = _logged(TOKEN_PATH, referer="https://console.example" + TOKEN_PATH)
    line = " ".join(str(atoms[key]) for key in ("r", "U", "f", "{referer}i"))
    assert "cq1x4b" not in line and "MTIz" not in line
    assert atoms["U"] == "/accounts/password-reset/…/…/"


def test_the_verification_token_is_cut_too():
    path = "/accounts/verify-email/WyJ1c3JfYWJjIiwiZGVmIl0:1vQx2:k9Zb3Vt-Xq/"
    atoms = _logged(path, referer="https://console.example" + path)
    line = " ".join(str(atoms[key]) for key in ("r", "U", "f", "{referer}i"))
    assert "WyJ1c3J" not in line and "k9Zb3Vt" not in line
    assert atoms["U"] == "/accounts/verify-email/…/"


def test_other_paths_are_logged_as_they_are():
    for path in (
        "/accounts/password-reset/sent/",
        "/accounts/verify-email/resend/",
        "/console/instances/ins_abc/",
        "/api/v1/me",
    ):
        assert _logged(path)["U"] == path


def test_the_applications_own_log_lines_lose_the_token_too():
    record = logging.LogRecord(
        "django.request", logging.ERROR, __file__, 1, "%s: %s", ("Not Found", TOKEN_PATH), None
    )
    assert RedactUrlSecrets().filter(record) is True
    assert record.getMessage() == "Not Found: /accounts/password-reset/…/…/"
