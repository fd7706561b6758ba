import io
import re

import pytest
from django.core.management import call_command
from django.utils import translation

from clusters.planner import GIB, PRESETS, Hardware, Pins, Shape, candidates, plan
from compute.models import Offering
from starverse.core.errors import InvalidInput

URL = "/api/v1/clusters/plan"
PAGE = "/clusters/plan/"
H100_NODE = Hardware("H100 80GB SXM", 80, 8, 1)


def _shape(key: str, **change: object) -> Shape:
    fields = {k: v for k, v in PRESETS[key].items() if k != "title"}
    return Shape(**{**fields, **change})


@pytest.fixture
def seeded(db):
    call_command("seed_catalog", stdout=io.StringIO())


def test_7b_on_one_8xh100_node_matches_the_hand_computation():
    found = plan(_shape("llama-7b"), H100_NODE)

    # ZeRO-0 needs 16 B × 7e9 = 112e9 B (104.3 GB) + activations: too much; ZeRO-1 splits
    # Adam's 12 B/param over DP 8 and fits with TP 1, PP 1.
    assert (found.tensor_parallel, found.pipeline_parallel, found.data_parallel) == (1, 1, 8)
    assert found.zero_stage == 1
    lines = {line["item"]: line["bytes"] for line in found.lines}
    assert lines == {
        "parameters": 2 * 7_000_000_000,
        "gradients": 2 * 7_000_000_000,
        "optimizer": 12 * 7_000_000_000 // 8,
        "activations": 34 * 4096 * 1 * 4096 * 32,  # s·b·h·34 per layer × 32 layers ÷ TP 1
    }
    assert found.total_bytes == 56_753_611_008
    answer = found.as_dict()
    assert [line["gb"] for line in answer["memory"]["lines"]] == [13.04, 13.04, 9.78, 17.0]
    assert answer["memory"]["total_gb"] == 52.86
    assert answer["memory"]["usable_gb"] == 72.0  # 80 GB less the 10 % margin
    assert found.total_bytes <= int(0.9 * 80 * GIB)


def test_zero_stages_split_by_data_parallel():
    from clusters.planner import estimate

    shape = _shape("llama-7b")
    by_stage = {
        zero: {line["item"]: line["bytes"] for line in estimate(shape, H100_NODE, 2, 1, zero).lines}
        for zero in (0, 1, 2, 3)
    }
    shard = 7_000_000_000 // 2  # TP 2, PP 1 → DP 4
    assert by_stage[0]["optimizer"] == 12 * shard
    assert by_stage[1]["optimizer"] == 12 * shard // 4
    assert by_stage[1]["gradients"] == 2 * shard
    assert by_stage[2]["gradients"] == 2 * shard // 4
    assert by_stage[2]["parameters"] == 2 * shard
    assert by_stage[3]["parameters"] == 2 * shard // 4
    assert by_stage[3]["activations"] == 34 * 4096 * 4096 * 32 // 2


def test_70b_needs_tensor_parallelism():
    found = plan(_shape("llama-70b"), Hardware("H100 80GB SXM", 80, 8, 4))

    assert found.tensor_parallel * found.pipeline_parallel > 1
    assert found.tensor_parallel == 8  # the whole node before any pipeline stage
    assert found.pipeline_parallel == 1
    assert found.data_parallel == 4
    assert found.total_bytes <= H100_NODE.usable_bytes


def test_pinned_degrees_move_70b_to_a_pipeline():
    found = plan(
        _shape("llama-70b"),
        Hardware("H100 80GB SXM", 80, 8, 4),
        Pins(tensor_parallel=4, zero_stage=1),
    )

    # PP 2: 3 × 16.30 GB + 24.45 + 21.25 activations = 78.3 GB > 72; PP 4 halves the weights
    assert (found.tensor_parallel, found.pipeline_parallel, found.data_parallel) == (4, 4, 2)
    assert found.zero_stage == 1
    assert "--pipeline-model-parallel-size 4" in found.as_dict()["megatron_command"]
    assert "--global-batch-size 32" in found.as_dict()["megatron_command"]  # 1 × 2 × 4·4


def test_a_model_that_cannot_fit_is_refused_with_what_it_needs():
    with pytest.raises(InvalidInput) as refused:
        plan(_shape("llama-70b"), H100_NODE)

    assert refused.value.code == "does_not_fit"
    # 16 B × 70e9 ÷ 8 GPUs = 140e9 B = 130.39 GB, + activations 34·4096·8192·80 ÷ 8 = 10.63 GB
    assert refused.value.message == (
        "The model does not fit on 1 × 8 H100 80GB SXM: even with TP=8, PP=1, ZeRO-3 it needs "
        "141.01 GB per GPU, and the GPU has 80 GB (72.00 GB after a 10% safety margin). Add "
        "nodes, shorten the sequence or the micro-batch."
    )


def test_candidates_prefer_no_pipeline_then_no_zero3_then_small_tp():
    order = candidates(_shape("llama-7b"), Hardware("H100", 80, 8, 2), Pins())

    assert order[:5] == [(1, 1, 0), (1, 1, 1), (1, 1, 2), (2, 1, 0), (2, 1, 1)]
    assert all(pp == 1 for _tp, pp, _z in order[: 4 * 3 + 4])
    assert all(32 % pp == 0 and 16 % (tp * pp) == 0 for tp, pp, _z in order)


def test_the_plan_is_deterministic():
    shape, hardware = _shape("llama-13b"), Hardware("A100", 80, 8, 2)

    assert plan(shape, hardware).as_dict() == plan(shape, hardware).as_dict()


def test_megatron_command_carries_the_degrees():
    found = plan(_shape("llama-70b"), Hardware("H100 80GB SXM", 80, 8, 4))
    command = found.as_dict()["megatron_command"]

    for part in (
        "torchrun --nnodes 4 --nproc_per_node 8",
        '--node_rank "$NODE_RANK"',
        '--master_addr "$MASTER_ADDR"',
        "pretrain_gpt.py",
        "--tensor-model-parallel-size 8",
        "--pipeline-model-parallel-size 1",
        "--num-layers 80",
        "--hidden-size 8192",
        "--num-attention-heads 64",
        "--seq-length 4096",
        "--micro-batch-size 1",
        "--global-batch-size 4",
        "--sequence-parallel",
        "--use-distributed-optimizer",
    ):
        assert part in command


# --- POST /api/v1/clusters/plan -------------------------------------------------------------


def test_anonymous_plan(api, seeded):
    response = api.post(
        URL, {"preset": "llama-7b", "gpu_model": "h100-80g", "node_count": 1}, format="json"
    )

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["gpus_per_node"] == 8 and body["gpu_memory_gb"] == 80
    assert (body["tensor_parallel"], body["pipeline_parallel"], body["data_parallel"]) == (1, 1, 8)
    assert body["zero_stage"] == 1
    assert [line["item"] for line in body["memory"]["lines"]] == [
        "parameters",
        "gradients",
        "optimizer",
        "activations",
    ]
    assert body["memory"]["total_bytes"] == 56_753_611_008
    assert "--tensor-model-parallel-size 1" in body["megatron_command"]


def test_fields_without_a_preset(api, seeded):
    response = api.post(
        URL,
        {
            "params_b": "1.3",
            "num_layers": 24,
            "hidden_size": 2048,
            "seq_length": 2048,
            "micro_batch_size": 4,
            "gpu_model": "a100-80g",
            "node_count": 2,
        },
        format="json",
    )

    assert response.status_code == 200, response.json()
    assert response.json()["gpus"] == 16
    assert "--num-attention-heads 16" in response.json()["megatron_command"]  # 2048 ÷ 128


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"pipeline_parallel": 3}, "pipeline_parallel"),  # 32 layers
        ({"tensor_parallel": 16}, "tensor_parallel"),  # more than a node
        ({"tensor_parallel": 8, "num_attention_heads": 20, "hidden_size": 5120}, "tensor_parallel"),
        ({"num_attention_heads": 3}, "num_attention_heads"),  # 4096 % 3
        ({"gpu_model": "tpu-v5"}, "gpu_model"),
        ({"node_count": 0}, "node_count"),
        ({"node_count": 129}, "node_count"),
        ({"preset": None, "params_b": "7"}, "num_layers"),
        ({"seq_length": "long"}, "seq_length"),
        ({"zero": 1}, "zero"),
    ],
)
def test_bad_input_names_the_field(api, seeded, change, field):
    data = {"preset": "llama-7b", "gpu_model": "h100-80g", "node_count": 1, **change}
    data = {key: value for key, value in data.items() if value is not None}

    response = api.post(URL, data, format="json")

    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()


def test_refusal_is_a_400_with_its_reason(api, seeded):
    response = api.post(
        URL, {"preset": "llama-70b", "gpu_model": "rtx4090", "node_count": 1}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["code"] == "does_not_fit"
    assert "RTX 4090 24GB" in response.json()["detail"]


def test_the_route_is_not_read_as_a_cluster_id(api, seeded):
    assert api.get(URL).status_code == 405


# --- the page -------------------------------------------------------------------------------


def test_the_page_plans_the_first_preset_without_javascript(client, seeded):
    response = client.get(PAGE)

    html = response.content.decode()
    assert response.status_code == 200
    assert '<div class="stat-value" id="plan-tp">1</div>' in html
    assert '<div class="stat-value" id="plan-dp">8</div>' in html
    assert '<div class="stat-value" id="plan-zero">1</div>' in html
    assert '<td class="num strong" id="plan-total">52.86</td>' in html
    assert "--tensor-model-parallel-size 1" in html
    assert 'data-copy="#megatron-command"' in html
    # the GPU named once, with its memory after it (it read "a 80 GB H100 80GB SXM")
    assert re.search(r"Usable of one [^<]*GB[^<]* \(\d+ GB\) after a \d+% safety margin", html)
    assert "Usable on a" not in html


def test_the_page_reads_the_form(client, seeded):
    response = client.get(PAGE, {"preset": "llama-70b", "gpu_model": "h100-80g", "node_count": "4"})

    html = response.content.decode()
    assert '<div class="stat-value" id="plan-tp">8</div>' in html
    assert '<div class="stat-value" id="plan-dp">4</div>' in html


def test_the_plan_orders_a_cluster_with_its_sizes(client, seeded):
    node = Offering.objects.get(slug="h100-80g-bare-metal")
    response = client.get(PAGE, {"preset": "llama-70b", "gpu_model": "h100-80g", "node_count": "4"})

    html = response.content.decode()
    # TP 8 × PP 1 × DP 4 on four whole 8×H100 nodes, as the cluster order form takes them
    order = (
        f'href="/console/clusters/new/?offering={node.id}&amp;node_count=4'
        '&amp;tensor_parallel=8&amp;pipeline_parallel=1" id="plan-order"'
    )
    assert order in html
    assert "Order a cluster with this plan" in html


def test_a_plan_without_a_cluster_to_order_says_so(client, seeded):
    # one node is no cluster: it is rented whole on Rent
    node = Offering.objects.get(slug="h100-80g-bare-metal")
    one = client.get(PAGE, {"preset": "llama-7b", "gpu_model": "h100-80g", "node_count": "1"})
    html = one.content.decode()
    assert f'href="/console/rent/?offering={node.id}" id="plan-order"' in html
    assert "Rent this node" in html
    # the RTX 4090 has no whole-node offering: nothing to order it with
    small = client.get(PAGE, {"preset": "llama-7b", "gpu_model": "rtx4090", "node_count": "2"})
    assert 'id="plan-result"' in small.content.decode()
    assert 'id="plan-order"' not in small.content.decode()
    assert "No whole-node offering of this GPU model" in small.content.decode()


def test_the_page_shows_refusals_and_field_errors(client, seeded):
    refused = client.get(PAGE, {"preset": "llama-70b", "gpu_model": "h100-80g", "node_count": "1"})
    assert "even with TP=8, PP=1, ZeRO-3" in refused.content.decode()
    assert 'id="plan-result"' not in refused.content.decode()

    wrong = client.get(
        PAGE,
        {
            "preset": "llama-7b",
            "gpu_model": "h100-80g",
            "node_count": "1",
            "num_attention_heads": "3",
        },
    )
    assert wrong.status_code == 200
    assert "must be a multiple of the attention heads" in wrong.content.decode()


def test_the_page_renders_in_chinese(client, seeded):
    response = client.get(PAGE, HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9")

    html = response.content.decode()
    assert response.status_code == 200
    assert 'lang="zh-hans"' in html
    with translation.override("zh-hans"):
        assert translation.gettext("Cost calculator") in html
    assert 'id="plan-tp">1<' in html


def test_the_calculator_links_the_planner(client, seeded):
    assert 'href="/clusters/plan/"' in client.get("/billing/calculator/").content.decode()
