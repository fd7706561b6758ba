"""The agent's own node credential (nodeagent.credentials), against a small platform on
127.0.0.1 that registers nodes with a bootstrap token and accepts each node's reports with that
node's token only: the first start registers and keeps the token on the node (0600), later
starts use it, a refused token makes the agent register again, and a node that is registered
elsewhere keeps its reports and says what the operator must do."""

import json
import logging
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from nodeagent.credentials import NodeCredentials, TokenUnavailable, registration_spec
from nodeagent.fixture import open_fixture_source
from nodeagent.report import PendingReport, Reporter
from tests.nodeagent import FIXTURES, FakeMonotonic, _Quiet, _Server, run_python, serving

NODE = "gpu-h100-01"
BOOTSTRAP = "boot-7f3a9c"
SPEC = {"gpu_product": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "gpu_memory_mb": 81559}


class _Handler(_Quiet):
    def do_POST(self) -> None:
        platform: Registry = self.server.owner  # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        with platform.lock:
            platform.requests.append((self.path, body))
            if platform.down:
                self.reply(503, {"detail": "Service unavailable."})
            elif self.path == "/api/v1/nodes/register":
                self.reply(*platform.register(body))
            else:
                node = self.path.split("/")[4]
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                if token and platform.tokens.get(node) == token:
                    platform.reports.append((node, body))
                    self.reply(202, {"accepted_samples": len(body["samples"]), "refused": []})
                else:
                    self.reply(401, {"detail": "Unknown node or wrong node token."})


class Registry(_Server):
    """The platform's node endpoints: register (bootstrap token; 409 for a node with a token)
    and report (the node's own token only)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tokens: dict[str, str | None] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.reports: list[tuple[str, dict[str, Any]]] = []
        self.issued = 0
        self.down = False
        super().__init__(_Handler)

    def register(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if body.get("bootstrap_token") != BOOTSTRAP:
            return 401, {"detail": "Unknown bootstrap token."}
        if self.tokens.get(body["name"]):
            return 409, {"detail": "already registered", "code": "node_exists"}
        self.issued += 1
        token = f"svn_node{self.issued}"
        self.tokens[body["name"]] = token
        return 201, {"name": body["name"], "token": token}

    def reset(self, node: str) -> None:
        """The admin's "Reset agent registration"."""
        with self.lock:
            self.tokens[node] = None

    def registrations(self) -> list[dict[str, Any]]:
        return [body for path, body in self.requests if path.endswith("/register")]


@pytest.fixture
def bootstrap(tmp_path: Path) -> Path:
    path = tmp_path / "bootstrap" / "token"
    path.parent.mkdir()
    path.write_text(BOOTSTRAP + "\n")
    return path


def _pending(at: str = "2026-11-29T21:00:00Z") -> PendingReport:
    return PendingReport(
        driver={"driver_version": "550.54.15", "cuda_version": "12.4", "nvml_version": "12.550"},
        inventory=[],
        samples=[{"at": at, "gpus": []}],
    )


def _agent(url: str, token_file: Path, bootstrap: Path | None) -> tuple[NodeCredentials, Reporter]:
    credentials = NodeCredentials(url, NODE, token_file, bootstrap, lambda: dict(SPEC), timeout=2)
    reporter = Reporter(
        url,
        NODE,
        credentials.token,
        clock=FakeMonotonic(),
        jitter=lambda delay: delay,
        timeout=2,
        on_refused=credentials.refused,
    )
    return credentials, reporter


def test_the_first_start_registers_and_keeps_the_token_for_root_only(tmp_path, bootstrap):
    token_file = tmp_path / "state" / "node-token"
    with serving(Registry()) as platform:
        _credentials, reporter = _agent(platform.url, token_file, bootstrap)
        reporter.submit(_pending())
        assert reporter.flush() == 1

    assert platform.registrations() == [{"name": NODE, "bootstrap_token": BOOTSTRAP, **SPEC}]
    assert token_file.read_text() == "svn_node1"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    assert [node for node, _body in platform.reports] == [NODE]
    assert list(token_file.parent.iterdir()) == [token_file]  # no temporary file left over


def test_a_later_start_uses_the_kept_token_and_never_registers(tmp_path, bootstrap):
    token_file = tmp_path / "node-token"
    with serving(Registry()) as platform:
        first = _agent(platform.url, token_file, bootstrap)[1]
        first.submit(_pending())
        first.flush()
        restarted = _agent(platform.url, token_file, bootstrap)[1]  # the pod restarted
        restarted.submit(_pending("2026-11-29T21:00:15Z"))
        assert restarted.flush() == 1

    assert len(platform.registrations()) == 1
    assert len(platform.reports) == 2


def test_a_reset_registration_makes_the_agent_register_again(tmp_path, bootstrap, caplog):
    token_file = tmp_path / "node-token"
    with serving(Registry()) as platform:
        credentials, reporter = _agent(platform.url, token_file, bootstrap)
        reporter.submit(_pending())
        reporter.flush()
        platform.reset(NODE)
        reporter.submit(_pending("2026-11-29T21:00:15Z"))

        assert reporter.flush() == 1

    assert token_file.read_text() == "svn_node2"
    assert len(platform.reports) == 2 and reporter.pending == 0
    assert credentials.registrations == 2
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "THE PLATFORM REFUSED THIS NODE'S TOKEN (HTTP 401: Unknown node or wrong node token.): "
        "its registration was reset or its token replaced; registering node 'gpu-h100-01' "
        "again with the bootstrap token"
    ]


def test_a_node_registered_elsewhere_keeps_its_reports_and_names_the_fix(
    tmp_path, bootstrap, caplog
):
    token_file = tmp_path / "node-token"
    with serving(Registry()) as platform:
        platform.tokens[NODE] = "svn_someone_else"
        _credentials, reporter = _agent(platform.url, token_file, bootstrap)
        reporter.submit(_pending())

        assert reporter.flush() == 0
        assert reporter.pending == 1  # kept, retried later
        assert reporter.next_attempt > 0
        platform.reset(NODE)  # the operator resets it
        reporter.next_attempt = 0
        assert reporter.flush() == 1

    assert not any("dropped" in r.getMessage() for r in caplog.records)
    problems = [r.getMessage() for r in caplog.records if "ALREADY REGISTERED" in r.getMessage()]
    assert problems and '"Reset agent registration"' in problems[0]
    assert token_file.read_text() == "svn_node1"


def test_an_unreachable_platform_at_first_start_is_retried(tmp_path, bootstrap):
    token_file = tmp_path / "node-token"
    with serving(Registry()) as platform:
        platform.down = True
        _credentials, reporter = _agent(platform.url, token_file, bootstrap)
        reporter.submit(_pending())
        assert reporter.flush() == 0
        assert (reporter.pending, reporter.failures) == (1, 1)
        assert not token_file.exists()
        platform.down = False
        reporter.next_attempt = 0
        assert reporter.flush() == 1
    assert token_file.read_text() == "svn_node1"


def test_without_a_bootstrap_token_a_refusal_is_final_as_before(tmp_path):
    token_file = tmp_path / "node-token"
    token_file.write_text("svn_revoked")
    with serving(Registry()) as platform:
        credentials = NodeCredentials(platform.url, NODE, token_file, None, lambda: dict(SPEC))
        assert credentials.refused(401, "no") is False
        with pytest.raises(TokenUnavailable, match="no bootstrap token"):
            NodeCredentials(platform.url, NODE, tmp_path / "none", None, dict).token()
    assert platform.requests == []


def test_the_registration_describes_the_nodes_gpus():
    source = open_fixture_source(FIXTURES / "h100_8x_healthy.json")
    try:
        assert registration_spec(source.inventory()) == SPEC
    finally:
        source.close()
    with pytest.raises(TokenUnavailable, match="no GPU"):
        registration_spec([])


def test_the_cli_registers_with_the_bootstrap_token_file(tmp_path, bootstrap):
    token_file = tmp_path / "state" / "node-token"
    args = [
        "-m",
        "nodeagent",
        "--once",
        "--source",
        f"fixture:{FIXTURES / 'h100_8x_healthy.json'}",
        "--node",
        NODE,
        "--token-file",
        str(token_file),
    ]
    with serving(Registry()) as platform:
        result = run_python(
            [*args, "--platform-url", platform.url],
            env={"NODEAGENT_BOOTSTRAP_TOKEN_FILE": str(bootstrap)},
        )
        assert result.returncode == 0, result.stderr
        again = run_python([*args, "--platform-url", platform.url])  # the kept token alone
        assert again.returncode == 0, again.stderr

    assert token_file.read_text() == "svn_node1"
    assert len(platform.registrations()) == 1 and len(platform.reports) == 2
    missing = run_python(
        [*args[:5], "--node", NODE, "--platform-url", "http://127.0.0.1:9"],
        env={"NODEAGENT_BOOTSTRAP_TOKEN_FILE": str(bootstrap)},
    )
    assert missing.returncode == 2
    assert "--bootstrap-token-file needs --token-file" in missing.stderr
