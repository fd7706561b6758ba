"""What the CLI's live tests share: the CLI run as a user runs it, a checkout page paid, its
JSON read."""

import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from starverse.core.hostkeys import host_key_from_private
from tests.sshd import InitRoot

REPO = Path(__file__).resolve().parents[2]


class Cli:
    """Runs `python -m starverse_cli` (as the installed `starverse` command runs it,
    PYTHONPATH=cli) with its own config directory and no inherited token."""

    def __init__(self, config_home: Path, api_url: str) -> None:
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(config_home),
            "XDG_CONFIG_HOME": str(config_home),
            "PYTHONPATH": str(REPO / "cli"),
            "STARVERSE_API_URL": api_url,
            "STARVERSE_POLL_INTERVAL": "0.1",
            "LANG": "C.UTF-8",
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "starverse_cli", *args]

    def start(self, *args: str) -> subprocess.Popen[str]:
        """The command running in the background (one that waits)."""
        return subprocess.Popen(
            self.argv(*args),
            env=self.env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def __call__(
        self, *args: str, stdin: str = "", timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            env=self.env,
            cwd=REPO,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def pay(checkout_url: str) -> None:
    """The Stripe stand-in's checkout page, paid by card (its form's POST); not following the
    redirect to the console's return page (the webhook credits the top-up)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    form = urllib.parse.urlencode({"method": "card"}).encode()
    try:
        request = urllib.request.Request(checkout_url, data=form, method="POST")  # noqa: S310
        opener.open(request, timeout=10)
    except urllib.error.HTTPError as answer:
        assert answer.code == 303, answer.read()


def json_of(done: subprocess.CompletedProcess[str]) -> Any:
    """A command's --json output; it must have succeeded."""
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def instance_sshd(root: Path, secret: dict[str, str], port: int) -> InitRoot:
    """The instance's sshd as its image runs it: the images' real init in the scratch `root`,
    with the access Secret the platform wrote (host key, authorized keys), listening on the
    port the API gives; booted. Kill it with `.kill()`."""
    sshd = InitRoot(root, host_key_from_private(secret["ssh_host_ed25519_key"]))
    sshd.port = port
    sshd.secret(secret["authorized_keys"])
    sshd.boot()
    return sshd
