"""The images' `starverse-preflight` without torch or GPUs: the hostfile, the node pairing
(disjoint pairs a round, each node in two different pairs at least, so a bad node is told from
a bad pair), bus bandwidth as nccl-tests reports it, the JSON result, the arguments and the
per-node launch command."""

import json
from collections import Counter

import pytest
from starverse_init import preflight


def test_hosts_read_takes_slots_and_skips_comments():
    text = "# ranks\nclu-a-0.clu-a slots=8\n\nclu-a-1.clu-a slots=8  # rank 1\nsolo\n"
    assert preflight.hosts_read(text) == [("clu-a-0.clu-a", 8), ("clu-a-1.clu-a", 8), ("solo", 1)]


@pytest.mark.parametrize("nodes", range(2, 18))
def test_pair_rounds_put_every_node_in_two_pairs_without_overlap(nodes):
    rounds = preflight.pair_rounds(nodes)
    seen = set()
    partners: Counter[int] = Counter()
    for pairs in rounds:
        in_round = [node for pair in pairs for node in pair]
        assert len(in_round) == len(set(in_round))  # a node in one pair a round
        for a, b in pairs:
            assert 0 <= a < b < nodes
            assert (a, b) not in seen  # no pair twice
            seen.add((a, b))
            partners[a] += 1
            partners[b] += 1
    assert all(partners[node] >= min(2, nodes - 1) for node in range(nodes))
    assert len(rounds) <= 3  # a few rounds, whatever the size
    assert preflight.pair_rounds(1) == []


def test_busbw_is_nccl_tests_bus_bandwidth():
    # 4 GB in 0.02 s over 16 GPUs: algbw 200 GB/s, busbw 200 × 2 × 15/16
    assert preflight.busbw_gbps(4_000_000_000, 0.02, 16) == pytest.approx(375.0)
    assert preflight.busbw_gbps(4_000_000_000, 0.0, 16) == 0.0
    assert preflight.busbw_gbps(4_000_000_000, 1.0, 1) == 0.0


def test_summary_names_each_nodes_best_pair():
    hosts = ["h-0.h", "h-1.h", "h-2.h"]
    result = preflight.summary(
        overall_gbps=43.51,
        size_bytes=4_000_000_000,
        hosts=hosts,
        gpus_per_node=8,
        pairs=[(1, (0, 1), 44.4), (1, (2, 0), 370.0), (2, (1, 2), 44.4)],
    )
    json.dumps(result)  # JSON all the way
    assert result["busbw_gbps"] == 43.5
    assert result["nodes"] == 3 and result["gpus_per_node"] == 8
    assert result["pairs"][0] == {
        "round": 1,
        "ranks": [0, 1],
        "hosts": ["h-0.h", "h-1.h"],
        "busbw_gbps": 44.4,
    }
    best = {n["rank"]: n["best_gbps"] for n in result["per_node"]}
    assert best == {0: 370.0, 1: 44.4, 2: 370.0}  # rank 1 is slow in every pair


def test_arguments(capsys):
    args = preflight.parse_args(["--json"])
    assert args.json and not args.worker
    assert (args.size_gb, args.hostfile) == (preflight.DEFAULT_SIZE_GB, preflight.HOSTFILE)
    with pytest.raises(SystemExit):
        preflight.parse_args(["--size-gb", "0"])
    assert "--size-gb must be positive" in capsys.readouterr().err


def test_worker_command_meets_at_rank_0_next_to_master_port(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "clu-a-0.clu-a")
    monkeypatch.setenv("MASTER_PORT", "29500")
    args = preflight.parse_args(["--size-gb", "2"])
    hosts = [("clu-a-0.clu-a", 8), ("clu-a-1.clu-a", 8)]
    command = preflight.worker_command(args, node_rank=1, hosts=hosts, out="")
    assert command[1:3] == ["-m", "torch.distributed.run"]
    assert "--nnodes=2" in command and "--node-rank=1" in command
    assert "--nproc-per-node=8" in command
    assert "--master-addr=clu-a-0.clu-a" in command and "--master-port=29501" in command
    assert command[-3:] == ["--worker", "--size-gb=2.0", f"--hostfile={preflight.HOSTFILE}"]


def test_launch_refuses_a_hostfile_of_one_node(tmp_path, capsys):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("solo slots=8\n")
    assert preflight.main(["--json", f"--hostfile={hostfile}"]) == 2
    assert "fewer than two nodes" in capsys.readouterr().err
