"""The package as a program: no Django, pynvml only in nvml.py, the CLI end to end."""

import ast
import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.nodeagent import FIXTURES, REPO, FakePlatform, run_python, serving, wait_for

PACKAGE = REPO / "nodeagent"


def test_the_package_never_imports_django() -> None:
    script = (
        "import importlib, pkgutil, sys, json\n"
        "import nodeagent\n"
        "names = [m.name for m in pkgutil.walk_packages(nodeagent.__path__, 'nodeagent.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "print(json.dumps({'imported': sorted(names),\n"
        "  'django': sorted(n for n in sys.modules if n == 'django' or n.startswith('django.'))}))\n"
    )
    result = run_python(["-c", script])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["django"] == []
    assert report["imported"] == [
        "nodeagent.__main__",
        "nodeagent.agent",
        "nodeagent.credentials",
        "nodeagent.exporter",
        "nodeagent.fixture",
        "nodeagent.metrics",
        "nodeagent.nvml",
        "nodeagent.record",
        "nodeagent.report",
        "nodeagent.sim",
        "nodeagent.source",
    ]


def test_only_nvml_py_imports_pynvml_and_nothing_outside_the_stdlib() -> None:
    importers = []
    outside = set()
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "pynvml":
                    importers.append(path.name)
                elif top != "nodeagent" and top not in sys.stdlib_module_names:
                    outside.add(top)
    assert importers == ["nvml.py"]
    assert outside == set()


def test_the_platform_can_import_metrics_and_report_without_pynvml() -> None:
    script = (
        "import sys; sys.modules['pynvml'] = None\n"
        "from nodeagent.metrics import METRIC_NAMES\n"
        "from nodeagent import report, sim, fixture\n"
        "print(len(METRIC_NAMES), 'pynvml' in sys.modules and sys.modules['pynvml'] is not None)\n"
    )
    result = run_python(["-c", script])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "27 False\n"


def test_cli_replays_a_fixture_once_and_reports(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("svn_from_file\n")
    with serving(FakePlatform()) as platform:
        result = run_python(
            [
                "-m",
                "nodeagent",
                "--platform-url",
                platform.url,
                "--node",
                "gpu-h100-01",
                "--token-file",
                str(token),
                "--source",
                f"fixture:{FIXTURES / 'h100_xid79.json'}",
                "--once",
            ]
        )
    assert result.returncode == 0, result.stderr
    [request] = platform.requests
    assert request["path"] == "/api/v1/nodes/gpu-h100-01/report"
    assert request["headers"]["Authorization"] == "Bearer svn_from_file"
    assert [(e["gpu"], e["xid"]) for e in request["body"]["events"]] == [(3, 79)]
    assert len(request["body"]["samples"][0]["gpus"]) == 8


def test_cli_reads_its_settings_from_the_environment() -> None:
    with serving(FakePlatform()) as platform:
        result = run_python(
            ["-m", "nodeagent", "--once"],
            env={
                "NODEAGENT_PLATFORM_URL": platform.url,
                "NODEAGENT_NODE": "gpu-h100-07",
                "NODEAGENT_TOKEN": "svn_env",
                "NODEAGENT_INTERVAL": "30",
                "NODEAGENT_SOURCE": f"fixture:{FIXTURES / 'h100_gpu_lost.json'}",
            },
        )
    assert result.returncode == 0, result.stderr
    [request] = platform.requests
    assert request["path"] == "/api/v1/nodes/gpu-h100-07/report"
    assert request["headers"]["Authorization"] == "Bearer svn_env"
    assert request["body"]["lost_gpus"][0]["error"] == "GpuIsLost"


def test_cli_once_exits_1_when_the_platform_refuses() -> None:
    with serving(FakePlatform([401])) as platform:
        result = run_python(
            [
                "-m",
                "nodeagent",
                "--platform-url",
                platform.url,
                "--node",
                "gpu-h100-01",
                "--token",
                "svn_wrong",
                "--source",
                f"fixture:{FIXTURES / 'h100_8x_healthy.json'}",
                "--once",
            ]
        )
    assert result.returncode == 1
    assert "THE PLATFORM REFUSED THIS NODE'S TOKEN (HTTP 401" in result.stderr
    assert len(platform.requests) == 1


def test_cli_usage_errors_exit_2_with_one_message() -> None:
    result = run_python(["-m", "nodeagent", "--platform-url", "http://127.0.0.1:9", "--node", "n1"])
    assert result.returncode == 2
    assert result.stderr == (
        "nodeagent: no node token: give --token-file PATH or --token T (or NODEAGENT_TOKEN)\n"
    )
    result = run_python(
        ["-m", "nodeagent", "--platform-url", "http://x", "--node", "n", "--token", "t",
         "--source", "gpu"]
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == "nodeagent: unknown --source 'gpu': nvml, sim or fixture:PATH\n"
    result = run_python(
        ["-m", "nodeagent", "--platform-url", "http://x", "--node", "n", "--token-file",
         "/nonexistent/token"]
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("nodeagent: cannot read the node token from /nonexistent/token")


def test_cli_runs_until_sigterm_reporting_every_interval() -> None:
    with serving(FakePlatform()) as platform:
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nodeagent",
                "--platform-url",
                platform.url,
                "--node",
                "gpu-h100-01",
                "--token",
                "svn_test",
                "--interval",
                "0.1",
                "--source",
                f"fixture:{FIXTURES / 'rtx4090_8x.json'}",
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert wait_for(lambda: len(platform.requests) >= 3, timeout=5)
        finally:
            agent.send_signal(signal.SIGTERM)
            _out, err = agent.communicate(timeout=5)
    assert agent.returncode == 0, err
    assert "reporting to" in err
    assert "signal 15: stopping" in err
    bodies = platform.bodies()
    stamps = [body["samples"][0]["at"] for body in bodies]
    assert stamps == sorted(stamps)
    assert all(len(body["samples"][0]["gpus"]) == 8 for body in bodies)
