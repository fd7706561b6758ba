"""The node's own credential, bootstrapped the way a kubelet joins a cluster.

Every agent of the fleet is given the same bootstrap token, which can do one thing: register a
node that holds no token yet (the platform refuses a name that is already registered). On its
first start the agent registers its node with it and keeps the node token it gets back in a
file on the node's own disk that only root can read (`--token-file`, 0600 in a 0700
directory); later starts read that file and never register again. So each agent holds only
its own node's token: a compromised node yields that node's reports, and a bootstrap token
that cannot take over a registered node.

When the platform refuses the node token (401/403: an operator reset the node's registration
to rotate it, or issued another token), an agent that has the bootstrap token registers again,
keeps the new token and sends its reports; one that cannot (the node is registered and holds
another token) says loudly what the operator must do and keeps its reports for later.

    POST {platform}/api/v1/nodes/register   (with "region" when the agent is given one)
    {"name", "bootstrap_token", "gpu_product", "gpu_count", "gpu_memory_mb"}
    → 201 {"name", "token"} | 401 (wrong bootstrap token) | 409 (already registered)
"""

import contextlib
import json
import logging
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodeagent import AGENT_VERSION
from nodeagent.source import GpuInfo

log = logging.getLogger(__name__)
REGISTER_PATH = "/api/v1/nodes/register"


class TokenUnavailable(OSError):
    """No node token to send now (not registered yet, the platform unreachable, or the node
    registered with a token this agent does not hold); the reports wait and are retried."""


def registration_spec(inventory: list[GpuInfo]) -> dict[str, Any]:
    """What the platform records about a node that registers: its GPUs, from the source."""
    if not inventory:
        raise TokenUnavailable("no GPU answers on this node: nothing to register")
    first = inventory[0]
    return {
        "gpu_product": first["product"],
        "gpu_count": len(inventory),
        "gpu_memory_mb": first["memory_total_mb"],
    }


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class NodeCredentials:
    """The node token kept in `token_file`, registered with the bootstrap token (read from
    `bootstrap_file`) when there is none or the platform refuses it."""

    def __init__(
        self,
        platform_url: str,
        node: str,
        token_file: str | os.PathLike[str],
        bootstrap_file: str | os.PathLike[str] | None,
        spec: Callable[[], dict[str, Any]],
        *,
        timeout: float = 10.0,
        region: str = "",
    ) -> None:
        parsed = urllib.parse.urlsplit(platform_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"the platform URL must be http(s)://host[:port]: {platform_url!r}")
        self.register_url = platform_url.rstrip("/") + REGISTER_PATH
        self.node = node
        self.token_file = Path(token_file)
        self.bootstrap_file = Path(bootstrap_file) if bootstrap_file else None
        self._spec = spec
        self.timeout = timeout
        self.region = region
        self._opener = urllib.request.build_opener(_NoRedirect())
        self.registrations = 0

    @property
    def can_register(self) -> bool:
        return self.bootstrap_file is not None

    def token(self) -> str:
        """The node token: the one kept on the node, or one registered now with the bootstrap
        token. Raises TokenUnavailable when there is neither."""
        kept = self._kept()
        if kept:
            return kept
        if self.bootstrap_file is None:
            raise TokenUnavailable(f"no node token in {self.token_file} and no bootstrap token")
        return self._register()

    def refused(self, status: int, detail: str) -> bool:
        """The platform refused the node token: register again if the bootstrap token allows
        it. True once a new token is kept (send the reports again), False otherwise."""
        if self.bootstrap_file is None:
            return False
        log.error(
            "THE PLATFORM REFUSED THIS NODE'S TOKEN (HTTP %s: %s): its registration was reset "
            "or its token replaced; registering node %r again with the bootstrap token",
            status,
            detail or "no detail",
            self.node,
        )
        with contextlib.suppress(FileNotFoundError):
            self.token_file.unlink()
        try:
            self._register()
        except TokenUnavailable as exc:
            log.error("%s", exc)
            return False
        return True

    # --- the token file -------------------------------------------------------------------

    def _kept(self) -> str:
        try:
            return self.token_file.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return ""

    def _keep(self, token: str) -> None:
        """Write the token where only root (this agent) can read it, atomically: a crash
        leaves the old file or the new one, never half of one."""
        folder = self.token_file.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".node-token-")
        try:
            os.fchmod(handle, 0o600)
            os.write(handle, token.encode("utf-8"))
            os.fsync(handle)
        finally:
            os.close(handle)
        try:
            os.replace(temporary, self.token_file)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    # --- registration ---------------------------------------------------------------------

    def _register(self) -> str:
        assert self.bootstrap_file is not None
        try:
            bootstrap = self.bootstrap_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise TokenUnavailable(f"cannot read the bootstrap token: {exc}") from None
        body = {"name": self.node, "bootstrap_token": bootstrap, **self._spec()}
        if self.region:
            body["region"] = self.region
        request = urllib.request.Request(  # noqa: S310 - the URL's scheme is checked: http(s)
            self.register_url,
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": f"starverse-nodeagent/{AGENT_VERSION}",
            },
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                answer = json.loads(response.read(65536))
        except urllib.error.HTTPError as exc:
            raise TokenUnavailable(self._refusal(exc)) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TokenUnavailable(f"cannot register node {self.node!r}: {reason}") from None
        token = str(answer.get("token") or "") if isinstance(answer, dict) else ""
        if not token:
            raise TokenUnavailable("the platform's registration answer carries no token")
        self._keep(token)
        self.registrations += 1
        log.info("registered node %r; its node token is kept in %s", self.node, self.token_file)
        return token

    def _refusal(self, exc: urllib.error.HTTPError) -> str:
        try:
            detail = json.loads(exc.read(65536) or b"{}").get("detail", "")
        except (ValueError, AttributeError, OSError):
            detail = ""
        finally:
            with contextlib.suppress(Exception):
                exc.close()
        if exc.code == 409:
            return (
                f"NODE {self.node!r} IS ALREADY REGISTERED and this agent holds no token the "
                "platform accepts (its token file was lost, or another agent uses the name): "
                "an operator must reset its registration (admin: Fleet → Nodes → "
                f'{self.node} → "Reset agent registration"); reports are kept until then'
            )
        if exc.code in (401, 403):
            return (
                f"THE PLATFORM REFUSED THE BOOTSTRAP TOKEN (HTTP {exc.code}: {detail}): check "
                "that it equals the platform's NODE_BOOTSTRAP_TOKEN"
            )
        return f"cannot register node {self.node!r}: HTTP {exc.code} {detail}".rstrip()
