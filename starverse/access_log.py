"""Logs without the secrets that travel in URLs: a password-reset link carries a one-time token
in its path (/accounts/password-reset/<uid>/<token>/), and so does an e-mail verification link
(/accounts/verify-email/<token>/); whoever reads the logs must not be able to use them.
Gunicorn's access log runs with `--logger-class starverse.access_log.AccessLog` (as `make run`
and the image do); the application's own log lines (Django names the path of a failed request)
pass through RedactUrlSecrets (settings LOGGING). Its client address (`%(h)s`) is the client's
behind NUM_PROXIES proxies (starverse.core.addresses), not the ingress's."""

import logging
import re
from typing import Any

from gunicorn.glogging import Logger

from starverse.core.addresses import client_ip_of

# The reset link's user id and token; Django swaps the token for "set-password" after the first
# visit, and that form is no secret.
RESET_LINK = re.compile(r"(/accounts/password-reset/)(?!sent/|complete/)[^/\s?]+/[^/\s?]+/")
REDACTED = r"\1…/…/"
VERIFY_LINK = re.compile(r"(/accounts/verify-email/)(?!resend/)[^/\s?]+/")
# The atoms that can hold a path: request line, path, and the referring page.
PATH_ATOMS = ("r", "U", "f")


def redact(text: str) -> str:
    return VERIFY_LINK.sub(r"\1…/", RESET_LINK.sub(REDACTED, text))


class AccessLog(Logger):
    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> Any:
        atoms = super().atoms(resp, req, environ, request_time)
        for key in PATH_ATOMS:
            if isinstance(atoms.get(key), str):
                atoms[key] = redact(atoms[key])
        atoms["{referer}i"] = redact(str(atoms.get("{referer}i", "")))
        atoms["h"] = client_ip_of(environ) or atoms.get("h", "-")
        return atoms


class RedactUrlSecrets(logging.Filter):
    """Cut reset tokens out of a log record's message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        return True
