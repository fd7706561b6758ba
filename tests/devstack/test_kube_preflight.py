"""The emulator's simulated `starverse-preflight --json`: same leaf switch fast, across
switches slower (the spine), a node with an injected bad link slow in every pair it is in; and
programs found as a shell finds them, any of which a tenant (root) may have replaced."""

import json
from dataclasses import replace

from devstack.kube.shell import Container, Peer, ReplacedProgram, SimulatedShell


def _peer(rank, switch, *, bad=False, product="NVIDIA H100 80GB HBM3"):
    return Peer(rank, f"clu-a-{rank}.clu-a", f"node-{rank}", switch, product, 8, bad)


def _run(peers, *args):
    out: list[bytes] = []
    shell = SimulatedShell(
        Container("clu-a-0", "node-0", peers=tuple(peers)), out.append, tty=False
    )
    code = shell.run(" ".join(["starverse-preflight", *args]))
    return code, b"".join(out).decode()


def test_one_switch_is_fast_and_spanning_switches_slower():
    code, out = _run([_peer(i, "leaf-0") for i in range(4)], "--json")
    one = json.loads(out)
    assert code == 0 and 350 <= one["busbw_gbps"] <= 390
    assert {p["busbw_gbps"] for p in one["pairs"]} == {370.0}
    spread = json.loads(_run([_peer(i, f"leaf-{i % 2}") for i in range(4)], "--json")[1])
    assert spread["busbw_gbps"] < one["busbw_gbps"]
    across = [p for p in spread["pairs"] if (p["ranks"][0] - p["ranks"][1]) % 2]
    assert across and all(p["busbw_gbps"] < 370 for p in across)


def test_a_bad_link_is_slow_in_every_pair_and_a100_slower_than_h100():
    peers = [_peer(0, "leaf-0"), _peer(1, "leaf-0", bad=True), _peer(2, "leaf-0")]
    result = json.loads(_run(peers, "--json")[1])
    best = {n["rank"]: n["best_gbps"] for n in result["per_node"]}
    assert best[1] < 100 < best[0] == best[2]
    assert result["busbw_gbps"] < 100
    a100 = [_peer(i, "leaf-0", product="NVIDIA A100-SXM4-80GB") for i in range(2)]
    assert json.loads(_run(a100, "--json")[1])["busbw_gbps"] < 190


def test_without_a_cluster_it_says_so_and_plain_output_is_readable():
    code, out = _run([])
    assert code == 2 and "fewer than two nodes" in out
    code, out = _run([_peer(0, "leaf-0"), _peer(1, "leaf-0")])
    assert code == 0 and out.startswith("all-reduce busbw") and "GB/s" in out


def test_programs_are_found_as_a_shell_finds_them_and_a_tenant_can_replace_any():
    peers = (_peer(0, "leaf-0"), _peer(1, "leaf-0"))
    forged = ReplacedProgram(prints='{"busbw_gbps": 999}\n')
    container = Container(
        "clu-a-0",
        "node-0",
        peers=peers,
        replaced={"/usr/local/sbin/starverse-preflight": forged},
    )
    out: list[bytes] = []
    shell = SimulatedShell(container, out.append, tty=False)

    # a bare name: the first on PATH, here the tenant's in /usr/local/sbin
    assert shell.run("starverse-preflight --json") == 0
    assert json.loads(b"".join(out).decode()) == {"busbw_gbps": 999}
    out.clear()
    # by its absolute path: the image's own
    assert shell.run("/opt/starverse/bin/starverse-preflight --json") == 0
    assert 350 <= json.loads(b"".join(out).decode())["busbw_gbps"] <= 390
    out.clear()
    assert shell.run("/opt/starverse/bin/nothing") == 127
    assert b"".join(out).decode() == "bash: /opt/starverse/bin/nothing: No such file or directory\n"
    hung = SimulatedShell(
        replace(container, replaced={"/usr/local/bin/x": ReplacedProgram(hangs=True)}),
        out.append,
        tty=False,
    )
    assert (hung.run("x"), hung.hung) == (0, True)
