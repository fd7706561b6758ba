"""A SkyPilot task YAML read as a job order: every mapping, every note and every refusal, over a
hand-built catalog shaped like the seeded one (no database), and the catalog the database gives."""

import subprocess
import textwrap
from pathlib import Path

import pytest
from django.core.management import call_command

from jobs.skypilot import (
    Catalog,
    CatalogImage,
    CatalogOffering,
    Parsed,
    TaskError,
    catalog_from_db,
    parse_task,
    workdir_path,
)


def _offerings() -> tuple[CatalogOffering, ...]:
    made = []
    models = [
        ("h100-80g", "H100 80GB SXM", 23, 240, True),
        ("a100-80g", "A100 80GB SXM", 15, 120, True),
        ("rtx4090", "RTX 4090 24GB", 7, 60, False),
    ]
    for model, name, cores, memory, whole in models:
        if whole:
            made.append(
                CatalogOffering(
                    f"off_{model}_node", f"{model}-bare-metal", model, name, 8, "bare_metal",
                    cores * 8, memory * 8,
                )
            )  # fmt: skip
        for count in (1, 2, 4, 8):
            made.append(
                CatalogOffering(
                    f"off_{model}_{count}", f"{model}-x{count}", model, name, count, "cloud",
                    cores * count, memory * count,
                )
            )  # fmt: skip
    return tuple(made)


CATALOG = Catalog(
    offerings=_offerings(),
    images=(
        CatalogImage("pytorch-2.1", "starverse/pytorch:2.1-cuda12.1"),
        CatalogImage("deepspeed-0.12", "starverse/deepspeed:0.12-pytorch2.1"),
        CatalogImage("ubuntu", "ubuntu:22.04"),
    ),
)


def parse(text: str, env: dict[str, str] | None = None) -> Parsed:
    return parse_task(textwrap.dedent(text), CATALOG, env=env)


def refused(text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(TaskError) as raised:
        parse(text, env)
    return str(raised.value)


def sky_env(nodes: int, gpus: int) -> str:
    """The script's lines that give `run` SkyPilot's variables."""
    return (
        f"export SKYPILOT_NUM_NODES={nodes} SKYPILOT_NUM_GPUS_PER_NODE={gpus}\n"
        'export SKYPILOT_NODE_RANK="${NODE_RANK:-0}" SKYPILOT_TASK_ID="${STARVERSE_JOB_ID:-}"\n'
        'SKYPILOT_NODE_IPS="$(cat /etc/starverse/hosts 2>/dev/null || echo 127.0.0.1)"\n'
        "export SKYPILOT_NODE_IPS\n"
    )


MINIMAL = """
    resources:
      accelerators: H100:1
    run: python train.py
"""


def test_a_minimal_task_is_an_order_with_no_notes() -> None:
    parsed = parse(MINIMAL)
    assert parsed.order == {
        "name": "sky-task",
        "image": "pytorch-2.1",
        "script": "set -e\n" + sky_env(1, 1) + "exec bash -c 'python train.py'\n",
        "offering": "off_h100-80g_1",
        "node_count": 1,
    }
    assert parsed.notes == []


@pytest.mark.parametrize(
    ("accelerators", "offering"),
    [
        ("H100:8", "off_h100-80g_8"),
        ("H100", "off_h100-80g_1"),
        ("h100:2", "off_h100-80g_2"),
        ("{H100: 4}", "off_h100-80g_4"),
        ("A100-80GB:8", "off_a100-80g_8"),
        ("A100:2", "off_a100-80g_2"),
        ("RTX4090:4", "off_rtx4090_4"),
        ("'RTX 4090'", "off_rtx4090_1"),
        ("H100-80GB-SXM:1", "off_h100-80g_1"),
        ("H100:0.5", "off_h100-80g_1"),
    ],
)
def test_accelerators_as_skypilot_users_write_them(accelerators: str, offering: str) -> None:
    parsed = parse(f"resources:\n  accelerators: {accelerators}\nrun: x\n")
    assert parsed.order["offering"] == offering
    assert parsed.notes == []


def test_gpus_is_an_alias_of_accelerators() -> None:
    assert parse("resources: {gpus: 'A100:4'}\nrun: x\n").order["offering"] == "off_a100-80g_4"


def test_a_list_of_alternatives_takes_the_first_offered_and_names_the_rest() -> None:
    parsed = parse("resources:\n  accelerators: [H200:8, A100:8, H100:8]\nrun: x\n")
    assert parsed.order["offering"] == "off_a100-80g_8"
    assert parsed.notes == [
        "`resources.accelerators`: A100:8 is used, the first choice offered here; a job runs "
        "on one kind of GPU, so the other choices (H200:8, H100:8) are not used."
    ]


def test_a_set_of_alternatives_takes_one_gpu_of_the_first_offered() -> None:
    parsed = parse("resources:\n  accelerators: {L4, A100, H100}\nrun: x\n")
    assert parsed.order["offering"] == "off_a100-80g_1"
    assert parsed.notes == [
        "`resources.accelerators`: A100 is used, the first choice offered here; a job runs on "
        "one kind of GPU, so the other choices (L4, H100) are not used."
    ]


def test_an_alternative_with_a_count_nobody_offers_is_passed_over() -> None:
    parsed = parse("resources:\n  accelerators: [H100:3, A100:2]\nrun: x\n")
    assert parsed.order["offering"] == "off_a100-80g_2"
    assert "A100:2 is used" in parsed.notes[0]


def test_any_of_entries_are_alternatives_and_their_clouds_are_noted() -> None:
    parsed = parse(
        """
        resources:
          any_of:
            - infra: aws/us-west-2
              accelerators: H200:8
            - infra: gcp
              accelerators: H100:8
        run: x
        """
    )
    assert parsed.order["offering"] == "off_h100-80g_8"
    assert parsed.notes == [
        "`resources.accelerators`: H100:8 is used, the first choice offered here; a job runs "
        "on one kind of GPU, so the other choices (H200:8) are not used.",
        "`resources.any_of`: the clouds, regions and other settings of its entries are "
        "ignored: jobs run on this platform's cluster.",
    ]


def test_a_gpu_no_offering_has_is_refused_with_what_is_offered() -> None:
    assert refused("resources: {accelerators: 'TPU-v4:8'}\nrun: x\n") == (
        "`resources.accelerators: TPU-v4:8`: no offering here has TPU-v4 GPUs (offered: "
        "A100 80GB SXM, H100 80GB SXM, RTX 4090 24GB)."
    )


def test_a_count_no_offering_has_is_refused_with_the_counts_there_are() -> None:
    assert refused("resources: {accelerators: 'H100:3'}\nrun: x\n") == (
        "`resources.accelerators: H100:3`: H100 80GB SXM is offered with 1, 2, 4, 8 GPUs per "
        "node, not 3."
    )


@pytest.mark.parametrize("accelerators", ["'H100:lots'", "'H100:0'", "'H100:32'", "5", "':8'"])
def test_an_accelerator_not_of_the_form_is_refused(accelerators: str) -> None:
    message = refused(f"resources: {{accelerators: {accelerators}}}\nrun: x\n")
    assert message.startswith("`resources.accelerators: ")
    assert message.endswith("` is not of the form `H100:8`.")


def test_a_task_without_accelerators_is_refused() -> None:
    assert refused("run: x\n") == (
        "`resources.accelerators` is missing: jobs run on GPUs; name one, e.g. "
        "`accelerators: H100:8` (offered here: A100 80GB SXM, H100 80GB SXM, RTX 4090 24GB)."
    )


def test_several_nodes_take_whole_node_offerings() -> None:
    parsed = parse("num_nodes: 4\nresources: {accelerators: 'H100:8'}\nrun: x\n")
    assert (parsed.order["offering"], parsed.order["node_count"]) == ("off_h100-80g_node", 4)
    assert parsed.notes == []


def test_several_nodes_with_part_of_a_node_are_rounded_up_and_noted() -> None:
    parsed = parse("num_nodes: 2\nresources: {accelerators: 'A100:4'}\nrun: x\n")
    assert parsed.order["offering"] == "off_a100-80g_node"
    assert parsed.notes == [
        "`resources.accelerators: A100:4`: a job of 2 nodes takes whole nodes, so each node "
        "has 8 GPUs (a100-80g-bare-metal)."
    ]


def test_several_nodes_of_a_gpu_sold_only_by_the_gpu_are_refused() -> None:
    assert refused("num_nodes: 2\nresources: {accelerators: 'RTX4090:8'}\nrun: x\n") == (
        "`num_nodes: 2` with `resources.accelerators: RTX4090:8`: a job of several nodes takes "
        "whole nodes, and no whole-node offering of RTX 4090 24GB has 8 GPUs."
    )


def test_num_nodes_left_empty_is_one() -> None:
    assert parse("num_nodes:\nresources: {accelerators: H100}\nrun: x\n").order["node_count"] == 1


def test_up_to_128_nodes() -> None:
    parsed = parse("num_nodes: 128\nresources: {accelerators: 'H100:8'}\nrun: x\n")
    assert parsed.order["node_count"] == 128
    assert refused("num_nodes: 129\nresources: {accelerators: 'H100:8'}\nrun: x\n") == (
        "`num_nodes: 129` is over the limit of 128 nodes for one job."
    )


@pytest.mark.parametrize("value", ["0", "two", "true", "1.5", "-3"])
def test_num_nodes_that_is_not_a_count_is_refused(value: str) -> None:
    message = refused(f"num_nodes: {value}\nresources: {{accelerators: H100}}\nrun: x\n")
    assert message.startswith("`num_nodes: ")
    assert message.endswith("` must be a whole number of nodes, at least 1.")


def test_envs_and_secrets_are_strings() -> None:
    parsed = parse(
        """
        resources: {accelerators: H100}
        envs:
          MODEL_SIZE: 13b
          EPOCHS: 3
          LR: 0.0003
          DEBUG: true
          EMPTY: ''
        secrets:
          HF_TOKEN: hf_abc
        run: x
        """
    )
    assert parsed.order["env"] == {
        "MODEL_SIZE": "13b",
        "EPOCHS": "3",
        "LR": "0.0003",
        "DEBUG": "true",
        "EMPTY": "",
        "HF_TOKEN": "hf_abc",
    }


def test_an_env_left_null_is_refused_naming_it() -> None:
    text = """
        resources: {accelerators: H100}
        envs: {WANDB_API_KEY: null, MODEL: llama}
        secrets: {HF_TOKEN: null}
        run: x
    """
    assert refused(text) == (
        "`envs` leaves HF_TOKEN, WANDB_API_KEY without a value: give each one a value in the "
        "task (SkyPilot's `--env` at launch has no counterpart here)."
    )
    given = parse(text, env={"WANDB_API_KEY": "w", "HF_TOKEN": "h", "MODEL": "qwen"})
    assert given.order["env"] == {"WANDB_API_KEY": "w", "MODEL": "qwen", "HF_TOKEN": "h"}


def test_envs_that_are_not_a_mapping_or_not_names_are_refused() -> None:
    assert refused("resources: {accelerators: H100}\nenvs: [A, B]\nrun: x\n") == (
        "`envs` must be a mapping."
    )
    assert refused("resources: {accelerators: H100}\nenvs: {1BAD: x}\nrun: x\n") == (
        "`envs.1BAD` is not a valid environment variable name."
    )


def test_a_docker_image_of_the_catalog_is_that_image() -> None:
    for image_id, expected in [
        ("docker:starverse/deepspeed:0.12-pytorch2.1", "deepspeed-0.12"),
        ("docker:docker.io/library/ubuntu:22.04", "ubuntu"),
    ]:
        parsed = parse(f"resources: {{accelerators: H100, image_id: '{image_id}'}}\nrun: x\n")
        assert (parsed.order["image"], parsed.notes) == (expected, [])


def test_another_image_runs_on_the_default_image_with_a_note() -> None:
    parsed = parse("resources: {accelerators: H100, image_id: 'docker:me/mine:1'}\nrun: x\n")
    assert parsed.order["image"] == "pytorch-2.1"
    assert parsed.notes == [
        "`resources.image_id: docker:me/mine:1` is not one of this platform's images; your own "
        "images come later, so the job runs on the default image pytorch-2.1."
    ]
    parsed = parse("resources: {accelerators: H100, image_id: ami-0868a20f5a3bf9702}\nrun: x\n")
    assert parsed.order["image"] == "pytorch-2.1"
    assert parsed.notes == [
        "`resources.image_id: ami-0868a20f5a3bf9702` is a cloud machine image; jobs run in "
        "containers, so the job runs on the default image pytorch-2.1 (`docker:<image>` names "
        "one)."
    ]


def test_cpus_and_memory_beyond_the_offering_are_noted() -> None:
    fits = parse("resources: {accelerators: 'H100:8', cpus: 16+, memory: 64GB+}\nrun: x\n")
    assert fits.notes == []
    parsed = parse("resources: {accelerators: 'H100:1', cpus: 32+, memory: '512'}\nrun: x\n")
    assert parsed.notes == [
        "`resources.cpus: 32+`: each node of h100-80g-x1 has 23 CPU cores; the job gets those.",
        "`resources.memory: 512`: each node of h100-80g-x1 has 240 GB of memory; the job gets "
        "that.",
    ]
    assert refused("resources: {accelerators: H100, cpus: many}\nrun: x\n") == (
        "`resources.cpus: many` is not a number like 8 or 8+."
    )


@pytest.mark.parametrize(
    ("line", "note"),
    [
        ("cloud: aws", "`resources.cloud: aws` is ignored: jobs run on this platform's cluster."),
        ("infra: k8s", "`resources.infra: k8s` is ignored: jobs run on this platform's cluster."),
        ("region: us-east-1", "`resources.region: us-east-1` is ignored: jobs run on this "),
        ("zone: us-east-1a", "`resources.zone: us-east-1a` is ignored: jobs run on this "),
        ("use_spot: true", "`resources.use_spot: true` is ignored: jobs run on on-demand GPUs"),
        ("disk_size: 512", "`resources.disk_size: 512` is ignored: each node has the offering's"),
        ("ports: [8080, 8081]", "`resources.ports: [8080, 8081]` is ignored: jobs publish no "),
        ("instance_type: p4d.24xlarge", "`resources.instance_type: p4d.24xlarge` is ignored: "),
        ("autostop: 10", "`resources.autostop: 10` is ignored: a job's GPUs are released"),
        ("shiny: yes", "`resources.shiny: true` is not known here and is ignored."),
    ],
)
def test_resources_that_cannot_be_honoured_are_each_noted(line: str, note: str) -> None:
    parsed = parse(f"resources:\n  accelerators: H100\n  {line}\nrun: x\n")
    assert len(parsed.notes) == 1
    assert parsed.notes[0].startswith(note)


def test_file_mounts_say_where_the_data_should_go() -> None:
    parsed = parse(
        """
        resources: {accelerators: H100}
        file_mounts:
          /data: ./data
          /ckpt: {source: 's3://bucket/ckpt', mode: MOUNT}
        run: x
        """
    )
    assert parsed.notes == [
        "`file_mounts./data: ./data` is not copied: copy the local path to your NAS (under "
        "/nas) and read it from there.",
        "`file_mounts./ckpt: s3://bucket/ckpt` is not mounted: bucket mounts are not "
        "supported; copy the data to your NAS or a cloud disk.",
    ]


def test_setup_then_run_in_the_workdir() -> None:
    parsed = parse(
        """
        name: llama ft
        workdir: ~/code
        resources: {accelerators: H100}
        setup: |
          pip install -r requirements.txt
        run: |
          torchrun train.py --out "$CKPT"
        """
    )
    assert parsed.order["name"] == "llama ft"
    assert parsed.order["script"] == (
        "set -e\n" + sky_env(1, 1) + "cd /nas/workdir/llama-ft\n"
        "bash -c 'pip install -r requirements.txt\n'\n"
        "exec bash -c 'torchrun train.py --out \"$CKPT\"\n'\n"
    )
    assert parsed.notes == [
        "`workdir: ~/code` is not uploaded with the task: the job runs in /nas/workdir/llama-ft "
        "on your NAS, so copy the folder there first."
    ]


def test_workdir_path_is_safe_for_a_path() -> None:
    assert workdir_path("../../etc passwd") == "/nas/workdir/etc-passwd"
    assert workdir_path("...") == "/nas/workdir/sky-task"


def _bash(
    script: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    )


def test_run_gets_skypilots_variables_from_the_ranks_environment(tmp_path: Path) -> None:
    parsed = parse(
        """
        num_nodes: 4
        resources: {accelerators: 'H100:8'}
        run: |
          echo "$SKYPILOT_NODE_RANK/$SKYPILOT_NUM_NODES x$SKYPILOT_NUM_GPUS_PER_NODE"
          echo "head $(echo "$SKYPILOT_NODE_IPS" | head -n1) job $SKYPILOT_TASK_ID"
        """
    )
    done = _bash(parsed.order["script"], tmp_path, {"NODE_RANK": "3", "STARVERSE_JOB_ID": "j-1"})
    assert (done.returncode, done.stdout) == (0, "3/4 x8\nhead 127.0.0.1 job j-1\n")


def test_the_script_stops_when_setup_fails_and_exits_with_runs_code(tmp_path: Path) -> None:
    failing = parse(
        """
        resources: {accelerators: H100}
        setup: |
          echo setting up
          false
          echo 'setup goes on, as SkyPilot runs it (no set -e)'
          exit 7
        run: echo running
        """
    )
    done = _bash(failing.order["script"], tmp_path)
    assert (done.returncode, done.stdout) == (
        7,
        "setting up\nsetup goes on, as SkyPilot runs it (no set -e)\n",
    )
    working = parse(
        """
        resources: {accelerators: H100}
        setup: |
          echo "it's set" > ready
        run: |
          cat ready
          false
          echo 'run goes on'
          exit 3
        """
    )
    done = _bash(working.order["script"], tmp_path)
    assert (done.returncode, done.stdout) == (3, "it's set\nrun goes on\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("resources: {accelerators: H100}\n", "`run` is missing: it is the command the job runs"),
        ("resources: {accelerators: H100}\nrun: '  '\n", "`run` is missing"),
        ("resources: {accelerators: H100}\nrun: [a, b]\n", "`run` is missing"),
        ("resources: {accelerators: H100}\nsetup: [a]\nrun: x\n", "`setup` must be a string"),
        ("resources: {accelerators: H100}\nworkdir: {url: g}\nrun: x\n", "`workdir: {url: g}`"),
        ("resources: H100\nrun: x\n", "`resources` must be a mapping."),
        ("run: [\n", "The task is not valid YAML: "),
        ("- run: x\n", "The task must be a YAML mapping with at least `run`."),
        ("run: a\n---\nrun: b\n", "The task has 2 YAML documents (a SkyPilot pipeline)"),
        ("name: ''\nrun: x\n", "`name` must be 1 to 100 characters."),
    ],
)
def test_tasks_that_cannot_run_are_refused_naming_the_field(text: str, message: str) -> None:
    assert refused(text).startswith(message)


def test_job_recovery_is_the_restart_policy() -> None:
    parsed = parse(
        """
        resources:
          accelerators: H100
          job_recovery: {strategy: FAILOVER, max_restarts_on_errors: 2}
        run: x
        """
    )
    assert parsed.order["max_restarts"] == 2
    assert parsed.notes == [
        "`resources.job_recovery.strategy: FAILOVER` is ignored: a lost node is replaced on "
        "this platform's cluster and the job resumes."
    ]
    parsed = parse("resources: {accelerators: H100, job_recovery: none}\nrun: x\n")
    assert parsed.order["max_restarts"] == 0
    assert parsed.notes[0].startswith("`resources.job_recovery: none`: lost nodes are still")
    parsed = parse("resources: {accelerators: H100, job_recovery: EAGER_NEXT_REGION}\nrun: x\n")
    assert "max_restarts" not in parsed.order
    assert len(parsed.notes) == 1
    assert (
        refused(
            "resources: {accelerators: H100, job_recovery: {max_restarts_on_errors: -1}}\nrun: x\n"
        )
        == "`resources.job_recovery.max_restarts_on_errors` must be a whole number, 0 or more."
    )


def test_what_is_not_a_job_is_noted() -> None:
    parsed = parse(
        """
        resources: {accelerators: H100}
        service: {readiness_probe: /health, replicas: 2}
        event_callback: ./notify.sh
        experimental: {config_overrides: {}}
        run: x
        """
    )
    assert parsed.notes == [
        "`service` is ignored: a job runs to its end; serve a model as an endpoint instead.",
        "`event_callback` is ignored: a job's end is e-mailed; watch it with `starverse jobs "
        "show` or `GET /api/v1/jobs/<id>/events`.",
        "`experimental` is not known here and is ignored.",
    ]


def test_a_complete_two_node_deepspeed_task() -> None:
    parsed = parse(
        """
        name: ds-train
        num_nodes: 2
        resources:
          cloud: aws
          accelerators: H100:8
          image_id: docker:starverse/deepspeed:0.12-pytorch2.1
          use_spot: true
          job_recovery:
            max_restarts_on_errors: 1
        envs:
          STEPS: 1000
        setup: pip install -e .
        run: |
          deepspeed --num_nodes $SKYPILOT_NUM_NODES train.py
        """
    )
    assert parsed.order == {
        "name": "ds-train",
        "image": "deepspeed-0.12",
        "script": "set -e\n" + sky_env(2, 8) + "bash -c 'pip install -e .'\n"
        "exec bash -c 'deepspeed --num_nodes $SKYPILOT_NUM_NODES train.py\n'\n",
        "offering": "off_h100-80g_node",
        "node_count": 2,
        "env": {"STEPS": "1000"},
        "max_restarts": 1,
    }
    assert [note.split("`")[1] for note in parsed.notes] == [
        "resources.cloud: aws",
        "resources.use_spot: true",
    ]


@pytest.mark.django_db
def test_catalog_from_db_is_the_seeded_catalog() -> None:
    from compute.models import Offering

    call_command("seed_catalog", verbosity=0)
    Offering.objects.filter(slug="rtx4090-x8").update(active=False)
    catalog = catalog_from_db()
    node = Offering.objects.get(slug="h100-80g-bare-metal")
    assert CatalogOffering(
        node.id, "h100-80g-bare-metal", "h100-80g", "H100 80GB SXM", 8, "bare_metal",
        node.cpu_cores, node.memory_gb,
    ) in catalog.offerings  # fmt: skip
    assert "rtx4090-x8" not in {o.slug for o in catalog.offerings}
    assert len(catalog.offerings) == Offering.objects.filter(active=True).count()
    assert catalog.images[0] == CatalogImage("pytorch-2.1", "starverse/pytorch:2.1-cuda12.1")
    parsed = parse_task("num_nodes: 2\nresources: {accelerators: 'A100:8'}\nrun: x\n", catalog)
    assert parsed.order["offering"] == Offering.objects.get(slug="a100-80g-bare-metal").id


def test_the_cli_readmes_example_task_runs_as_its_readme_says() -> None:
    readme = (Path(__file__).resolve().parents[2] / "cli" / "README.md").read_text()
    task = readme.split("```yaml\n# task.yaml\n", 1)[1].split("```", 1)[0]
    parsed = parse_task(task, CATALOG)
    assert {key: parsed.order[key] for key in ("name", "image", "offering", "node_count")} == {
        "name": "llama-ft",
        "image": "deepspeed-0.12",
        "offering": "off_h100-80g_node",
        "node_count": 2,
    }
    assert (parsed.order["env"], parsed.order["max_restarts"]) == ({"STEPS": "1000"}, 2)
    (note,) = parsed.notes
    assert f"# note: {note}\n" in readme
