"""The real node agent, replaying recorded NVML fixtures, reports over HTTP to a live platform:
agent → API → validation → storage → health rules."""

import subprocess
import sys
from pathlib import Path

import pytest

from fleet.choices import NodeState
from fleet.models import Gpu, GpuSample, Node, NodeEvent
from fleet.services import health_rules_ensure_defaults, node_token_issue, node_token_revoke

FIXTURES = Path(__file__).resolve().parents[2] / "nodeagent" / "fixtures"


def _agent(live_server, node, token, fixture):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "nodeagent",
            "--once",
            "--source",
            f"fixture:{FIXTURES / fixture}",
            "--platform-url",
            live_server.url,
            "--node",
            node.name,
            "--token",
            token,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=FIXTURES.parents[1],
    )


@pytest.fixture
def node(transactional_db):
    # A transactional test starts from an emptied database: put the default rules back.
    health_rules_ensure_defaults()
    return Node.objects.create(
        name="gpu-h100-07",
        gpu_product="NVIDIA H100 80GB HBM3",
        gpu_count=8,
        gpu_memory_mb=81559,
        interconnect="nvlink",
    )


def test_healthy_h100_report_is_stored(live_server, node):
    result = _agent(live_server, node, node_token_issue(node=node), "h100_8x_healthy.json")

    assert result.returncode == 0, result.stderr
    assert Gpu.objects.filter(node=node).count() == 8
    assert GpuSample.objects.filter(gpu__node=node).count() == 8
    node.refresh_from_db()
    assert (node.state, node.driver_version, node.cuda_version) == (
        NodeState.READY,
        "550.54.15",
        "12.4",
    )
    assert set(Gpu.objects.filter(node=node).values_list("product", flat=True)) == {
        "NVIDIA H100 80GB HBM3"
    }


def test_xid_79_from_the_agent_cordons_the_node(live_server, node):
    result = _agent(live_server, node, node_token_issue(node=node), "h100_xid79.json")

    assert result.returncode == 0, result.stderr
    node.refresh_from_db()
    assert node.state == NodeState.CORDONED
    assert "XID 79" in node.state_reason
    assert NodeEvent.objects.filter(node=node, kind="xid", code=79).exists()


def test_a_lost_gpu_is_reported_and_the_others_still_sample(live_server, node):
    result = _agent(live_server, node, node_token_issue(node=node), "h100_gpu_lost.json")

    assert result.returncode == 0, result.stderr
    node.refresh_from_db()
    assert node.state == NodeState.CORDONED
    assert GpuSample.objects.filter(gpu__node=node).count() == 7


def test_a_wrong_token_is_refused_loudly(live_server, node):
    result = _agent(live_server, node, "svn_" + "x" * 36, "h100_8x_healthy.json")

    assert result.returncode == 1
    assert "401" in result.stderr
    assert GpuSample.objects.count() == 0


def _bootstrapped_agent(live_server, name, token_file, bootstrap_file):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "nodeagent",
            "--once",
            "--source",
            f"fixture:{FIXTURES / 'h100_8x_healthy.json'}",
            "--platform-url",
            live_server.url,
            "--node",
            name,
            "--token-file",
            str(token_file),
            "--bootstrap-token-file",
            str(bootstrap_file),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=FIXTURES.parents[1],
    )


def test_an_agent_registers_itself_and_again_after_a_reset(
    live_server, transactional_db, settings, tmp_path
):
    health_rules_ensure_defaults()
    settings.NODE_BOOTSTRAP_TOKEN = "boot-7f3a9c"
    bootstrap = tmp_path / "bootstrap"
    bootstrap.write_text("boot-7f3a9c\n")
    token_file = tmp_path / "state" / "node-token"

    first = _bootstrapped_agent(live_server, "gpu-h100-09", token_file, bootstrap)

    assert first.returncode == 0, first.stderr
    node = Node.objects.get(name="gpu-h100-09")
    assert (node.gpu_product, node.gpu_count) == ("NVIDIA H100 80GB HBM3", 8)
    assert GpuSample.objects.filter(gpu__node=node).count() == 8
    kept = token_file.read_text()
    assert node.token_prefix and kept.startswith(node.token_prefix)

    node_token_revoke(node=node)
    again = _bootstrapped_agent(live_server, "gpu-h100-09", token_file, bootstrap)

    assert again.returncode == 0, again.stderr
    assert "registering node 'gpu-h100-09' again with the bootstrap token" in again.stderr
    assert token_file.read_text() != kept
    assert GpuSample.objects.filter(gpu__node=node).count() == 16
    assert NodeEvent.objects.filter(node=node, kind="registered").count() == 1
