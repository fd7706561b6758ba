"""The launch scripts a cluster's ranks get, run for real with bash: torchrun (and Megatron-LM)
started once on every rank over SSH with each rank's NODE_RANK, a failing rank failing the
launch, and DeepSpeed / Colossal-AI handed the hostfiles. `ssh` and the launchers are stand-ins
on PATH that record how they were called."""

import subprocess
from pathlib import Path

import pytest

from clusters import pods

LAYOUT = pods.Layout(cluster_id="clu_Fan", node_count=3, gpus_per_node=8, template="torchrun")
# A stand-in ssh: runs the command "on" the host given, with that rank's NODE_RANK (as sshd's
# SetEnv gives every session of a rank).
FAKE_SSH = """#!/bin/bash
while [ "$1" = "-o" ]; do shift 2; done
host=$1; shift
short=${host%%.*}
NODE_RANK=${short##*-} exec bash -c "$*"
"""
RECORD = """#!/bin/bash
echo "$(basename "$0") NODE_RANK=${NODE_RANK:-} $(printf '[%s]' "$@")" >> "$RECORD_FILE"
[ "${NODE_RANK:-}" != "${FAIL_RANK:-none}" ]
"""


def _install(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The scripts written where the ConfigMap puts them (below tmp_path), the stand-ins on
    PATH; returns the environment to run them in and the record file."""
    launch = tmp_path / "launch"
    bin_dir = tmp_path / "bin"
    launch.mkdir()
    bin_dir.mkdir()
    for name, text in pods.launch_scripts(LAYOUT).items():
        (launch / name).write_text(text.replace(pods.LAUNCH_DIR, str(launch)))
    for name, text in {"ssh": FAKE_SSH, "torchrun": RECORD, "deepspeed": RECORD}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "colossalai").write_text(RECORD)
    (bin_dir / "colossalai").chmod(0o755)
    record = tmp_path / "record"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD_FILE": str(record)}
    return env, launch


def _run(launch: Path, name: str, env: dict[str, str], *args: str, cwd: Path) -> int:
    return subprocess.run(
        ["bash", str(launch / name), *args], env=env, cwd=cwd, timeout=30, check=False
    ).returncode


@pytest.mark.parametrize("name", sorted(pods.launch_scripts(LAYOUT)))
def test_every_script_is_valid_bash(name, tmp_path):
    path = tmp_path / name
    path.write_text(pods.launch_scripts(LAYOUT)[name])
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0


def test_torchrun_starts_once_on_every_rank_from_the_same_directory(tmp_path):
    env, launch = _install(tmp_path)
    work = tmp_path / "my job"
    work.mkdir()
    assert _run(launch, "torchrun.sh", env, "train.py", "--name", "a b", cwd=work) == 0
    lines = sorted((tmp_path / "record").read_text().splitlines())
    master = "clu-fan-0.clu-fan"
    # each argument arrives whole ("a b" stays one), on the rank it names
    assert lines == [
        f"torchrun NODE_RANK={rank} [--nnodes=3][--nproc-per-node=8][--node-rank={rank}]"
        f"[--master-addr={master}][--master-port=29500][train.py][--name][a b]"
        for rank in range(3)
    ]


def test_a_failing_rank_fails_the_launch(tmp_path):
    env, launch = _install(tmp_path)
    assert _run(launch, "torchrun.sh", {**env, "FAIL_RANK": "2"}, "x.py", cwd=tmp_path) != 0
    assert len((tmp_path / "record").read_text().splitlines()) == 3


def test_megatron_gets_its_degrees_and_deepspeed_colossalai_the_hostfiles(tmp_path):
    env, launch = _install(tmp_path)
    assert _run(launch, "megatron.sh", env, "--num-layers", "2", cwd=tmp_path) == 0
    assert _run(launch, "deepspeed.sh", env, "train.py", cwd=tmp_path) == 0
    assert _run(launch, "colossalai.sh", env, "train.py", cwd=tmp_path) == 0
    lines = (tmp_path / "record").read_text().splitlines()
    megatron = sorted(line for line in lines if "pretrain_gpt.py" in line)
    assert len(megatron) == 3
    assert megatron[0].endswith(
        "[/opt/Megatron-LM/pretrain_gpt.py][--tensor-model-parallel-size][8]"
        "[--pipeline-model-parallel-size][1][--num-layers][2]"
    )
    assert (
        "deepspeed NODE_RANK= [--hostfile][/etc/starverse/hostfile][--master_addr]"
        "[clu-fan-0.clu-fan][--master_port][29500][train.py]"
    ) in lines
    assert (
        "colossalai NODE_RANK= [run][--hostfile][/etc/starverse/hosts][--nproc_per_node][8]"
        "[--master_addr][clu-fan-0.clu-fan][--master_port][29500][train.py]"
    ) in lines
