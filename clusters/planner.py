"""The parallelism planner: for a dense decoder-only transformer (Llama-like) trained in bf16 with
Adam in mixed precision, the tensor × pipeline × data parallel degrees and the ZeRO stage that fit
in a GPU model's memory on N whole nodes, the per-GPU memory estimate line by line, and a filled
Megatron-LM command. Pure arithmetic in integers of bytes: the same input gives the same plan.

Memory per GPU, with P parameters, TP = t, PP = p, DP = d (Rajbhandari et al., "ZeRO", 2020;
Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022):
- parameters, bf16: 2 · P / (t · p), divided by d under ZeRO-3;
- gradients, bf16: 2 · P / (t · p), divided by d under ZeRO-2 and ZeRO-3;
- optimizer states, fp32 master weights, momentum and variance: 12 · P / (t · p), divided by d
  under ZeRO-1 and above;
- activations, Megatron's estimate with sequence parallelism and selective recomputation (the
  attention scores recomputed, Korthikanti et al. table 2): 34 · s · b · h bytes per layer
  divided by t, for all L layers on the first pipeline stage (under 1F1B it holds L / p layers
  for p micro-batches in flight, so p cancels). The embedding and logits activations and the
  attention heads do not enter this estimate (heads only constrain TP).
The plan fits when the total stays within the GPU's memory less SAFETY_MARGIN (CUDA context,
NCCL buffers, allocator fragmentation). GB in this module are GiB (2^30 bytes), as GPU memory is
sold."""

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

from django.conf import settings
from django.utils.translation import gettext as _

from compute.choices import OfferingKind
from compute.models import Offering
from fleet.models import GpuModel
from starverse.core.errors import InvalidInput

GIB = 2**30
# Bytes per parameter, bf16 weights and gradients, Adam in mixed precision (fp32 master, m, v).
PARAM_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 2, 12
# Megatron's activation bytes per token of hidden size per layer, with sequence parallelism and
# selective recomputation: s·b·h·34/t.
ACTIVATION_FACTOR = 34
# Share of the GPU's memory kept free for the CUDA context, NCCL buffers and fragmentation.
SAFETY_MARGIN = Decimal("0.10")
# Without a head count, Llama's head size: hidden / 128 heads.
HEAD_SIZE = 128
# Micro-batches per step with a pipeline, per stage: a bubble of (p − 1) / (4p) at most.
MICRO_BATCHES_PER_STAGE = 4
ZERO_STAGES = (0, 1, 2, 3)
DEFAULT_GPUS_PER_NODE = 8

PRESETS: dict[str, dict[str, Any]] = {
    "llama-7b": {
        "title": "Llama-like 7B",
        "params_b": Decimal("7"),
        "num_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "seq_length": 4096,
        "micro_batch_size": 1,
    },
    "llama-13b": {
        "title": "Llama-like 13B",
        "params_b": Decimal("13"),
        "num_layers": 40,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "seq_length": 4096,
        "micro_batch_size": 1,
    },
    "llama-70b": {
        "title": "Llama-like 70B",
        "params_b": Decimal("70"),
        "num_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "seq_length": 4096,
        "micro_batch_size": 1,
    },
}


@dataclass(frozen=True)
class Shape:
    """The model and its training step: parameters in billions, layers, hidden size, attention
    heads (None: hidden / 128), sequence length and micro-batch size."""

    params_b: Decimal
    num_layers: int
    hidden_size: int
    seq_length: int
    micro_batch_size: int
    num_attention_heads: int | None = None

    @property
    def params(self) -> int:
        return int(self.params_b * 10**9)

    @property
    def heads(self) -> int | None:
        if self.num_attention_heads:
            return self.num_attention_heads
        return self.hidden_size // HEAD_SIZE if self.hidden_size % HEAD_SIZE == 0 else None


@dataclass(frozen=True)
class Hardware:
    """The GPUs: the model's name and memory in GB (fleet.GpuModel.memory_gb), GPUs per whole
    node, and the node count."""

    gpu_name: str
    memory_gb: int
    gpus_per_node: int
    node_count: int

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.node_count

    @property
    def usable_bytes(self) -> int:
        return int(self.memory_gb * GIB * (1 - SAFETY_MARGIN))


@dataclass(frozen=True)
class Pins:
    """Degrees the user fixed (None: the planner chooses)."""

    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    zero_stage: int | None = None


@dataclass
class Plan:
    shape: Shape
    hardware: Hardware
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    zero_stage: int
    lines: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(line["bytes"] for line in self.lines)

    @property
    def global_batch_size(self) -> int:
        per_step = (
            MICRO_BATCHES_PER_STAGE * self.pipeline_parallel if self.pipeline_parallel > 1 else 1
        )
        return self.shape.micro_batch_size * self.data_parallel * per_step

    def as_dict(self) -> dict[str, Any]:
        hw = self.hardware
        return {
            "gpu_model": hw.gpu_name,
            "gpu_memory_gb": hw.memory_gb,
            "gpus_per_node": hw.gpus_per_node,
            "node_count": hw.node_count,
            "gpus": hw.gpus,
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "data_parallel": self.data_parallel,
            "zero_stage": self.zero_stage,
            "global_batch_size": self.global_batch_size,
            "memory": {
                "lines": [{**line, "gb": gb(line["bytes"])} for line in self.lines],
                "total_bytes": self.total_bytes,
                "total_gb": gb(self.total_bytes),
                "usable_gb": gb(hw.usable_bytes),
                "safety_margin": float(SAFETY_MARGIN),
            },
            "megatron_command": megatron_command(self),
        }


def gb(nbytes: int) -> float:
    """Bytes as GB (GiB), two decimals."""
    return round(nbytes / GIB, 2)


def estimate(shape: Shape, hardware: Hardware, tp: int, pp: int, zero: int) -> Plan:
    """The per-GPU memory of one choice of degrees, line by line (see the module docstring)."""
    dp = hardware.gpus // (tp * pp)
    shard = shape.params // (tp * pp)
    s, b, h, layers = shape.seq_length, shape.micro_batch_size, shape.hidden_size, shape.num_layers
    split = f"P / (TP·PP) = {shard:,}"
    lines = [
        {
            "item": "parameters",
            "label": _("Parameters (bf16)"),
            "formula": f"2 B × {split}" + (f" ÷ DP {dp}" if zero >= 3 else ""),
            "bytes": PARAM_BYTES * shard // (dp if zero >= 3 else 1),
        },
        {
            "item": "gradients",
            "label": _("Gradients (bf16)"),
            "formula": f"2 B × {split}" + (f" ÷ DP {dp}" if zero >= 2 else ""),
            "bytes": GRAD_BYTES * shard // (dp if zero >= 2 else 1),
        },
        {
            "item": "optimizer",
            "label": _("Optimizer states (Adam: fp32 weights, momentum, variance)"),
            "formula": f"12 B × {split}" + (f" ÷ DP {dp}" if zero >= 1 else ""),
            "bytes": OPTIMIZER_BYTES * shard // (dp if zero >= 1 else 1),
        },
        {
            "item": "activations",
            "label": _("Activations (selective recomputation)"),
            "formula": f"34 × s {s} × b {b} × h {h} × L {layers} ÷ TP {tp}",
            "bytes": ACTIVATION_FACTOR * s * b * h * layers // tp,
        },
    ]
    return Plan(shape, hardware, tp, pp, dp, zero, lines)


def check(shape: Shape, hardware: Hardware, pins: Pins) -> dict[str, str]:
    """What is wrong with the input, by field (empty: nothing)."""
    errors: dict[str, str] = {}
    heads = shape.num_attention_heads
    if heads and shape.hidden_size % heads:
        errors["num_attention_heads"] = _(
            "The hidden size (%(hidden)d) must be a multiple of the attention heads."
        ) % {"hidden": shape.hidden_size}
    elif shape.heads is None:
        errors["num_attention_heads"] = _(
            "Give the attention heads: the hidden size is not a multiple of %(size)d."
        ) % {"size": HEAD_SIZE}
    tp, pp = pins.tensor_parallel, pins.pipeline_parallel
    if tp is not None:
        if tp > hardware.gpus_per_node or hardware.gpus_per_node % tp:
            errors["tensor_parallel"] = _(
                "Tensor parallelism stays within a node: choose a divisor of %(gpus)d."
            ) % {"gpus": hardware.gpus_per_node}
        elif shape.heads and shape.heads % tp:
            errors["tensor_parallel"] = _(
                "The attention heads (%(heads)d) must be a multiple of the tensor parallel size."
            ) % {"heads": shape.heads}
    if pp is not None and shape.num_layers % pp:
        errors["pipeline_parallel"] = _(
            "The layers (%(layers)d) must be a multiple of the pipeline parallel size."
        ) % {"layers": shape.num_layers}
    if tp and pp and not errors and hardware.gpus % (tp * pp):
        errors["pipeline_parallel"] = _(
            "TP × PP (%(mp)d) must divide the %(gpus)d GPUs, the rest being data parallel."
        ) % {"mp": tp * pp, "gpus": hardware.gpus}
    return errors


def candidates(shape: Shape, hardware: Hardware, pins: Pins) -> list[tuple[int, int, int]]:
    """Every allowed (TP, PP, ZeRO) in order of preference: the least pipeline parallelism
    first (it crosses nodes and adds a bubble), then ZeRO-3 last (it gathers the weights for
    every layer, forward and backward), then the least tensor parallelism (it stays in a node,
    on NVLink), then the lowest ZeRO stage; the rest of the GPUs are data parallel."""
    heads = shape.heads or 1
    tps = [
        t
        for t in range(1, hardware.gpus_per_node + 1)
        if hardware.gpus_per_node % t == 0 and heads % t == 0
    ]
    pps = [p for p in range(1, shape.num_layers + 1) if shape.num_layers % p == 0]
    found = [
        (t, p, z)
        for t in tps
        for p in pps
        for z in ZERO_STAGES
        if hardware.gpus % (t * p) == 0
        and pins.tensor_parallel in (None, t)
        and pins.pipeline_parallel in (None, p)
        and pins.zero_stage in (None, z)
    ]
    return sorted(found, key=lambda c: (c[1], c[2] == 3, c[0], c[2]))


def plan(shape: Shape, hardware: Hardware, pins: Pins | None = None) -> Plan:
    """The preferred degrees (candidates) whose estimate fits in the usable memory. Raises
    InvalidInput (code does_not_fit) saying what the leanest choice still needs."""
    pins = pins or Pins()
    options = candidates(shape, hardware, pins)
    for tp, pp, zero in options:
        found = estimate(shape, hardware, tp, pp, zero)
        if found.total_bytes <= hardware.usable_bytes:
            return found
    if not options:
        raise InvalidInput(
            _("No tensor × pipeline parallel split of %(gpus)d GPUs suits this model.")
            % {"gpus": hardware.gpus},
            code="does_not_fit",
        )
    leanest = min(
        (estimate(shape, hardware, tp, pp, zero) for tp, pp, zero in options),
        key=lambda p: (p.total_bytes, -p.zero_stage, -p.tensor_parallel, p.pipeline_parallel),
    )
    raise InvalidInput(
        _(
            "The model does not fit on %(nodes)d × %(per)d %(gpu)s: even with TP=%(tp)d, "
            "PP=%(pp)d, ZeRO-%(zero)d it needs %(need).2f GB per GPU, and the GPU has "
            "%(have)d GB (%(usable).2f GB after a %(margin)d%% safety margin). Add nodes, "
            "shorten the sequence or the micro-batch."
        )
        % {
            "nodes": hardware.node_count,
            "per": hardware.gpus_per_node,
            "gpu": hardware.gpu_name,
            "tp": leanest.tensor_parallel,
            "pp": leanest.pipeline_parallel,
            "zero": leanest.zero_stage,
            "need": gb(leanest.total_bytes),
            "have": hardware.memory_gb,
            "usable": gb(hardware.usable_bytes),
            "margin": int(SAFETY_MARGIN * 100),
        },
        code="does_not_fit",
    )


# Megatron-LM flags per ZeRO stage: its distributed optimizer shards the optimizer states
# (ZeRO-1); Megatron FSDP shards the gradients too (ZeRO-2) and the weights (ZeRO-3).
_FSDP = ["--use-megatron-fsdp", "--no-gradient-accumulation-fusion", "--ckpt-format fsdp_dtensor"]
_ZERO_FLAGS = {
    0: [],
    1: ["--use-distributed-optimizer"],
    2: ["--use-distributed-optimizer", *_FSDP, "--data-parallel-sharding-strategy optim_grads"],
    3: [
        "--use-distributed-optimizer",
        *_FSDP,
        "--data-parallel-sharding-strategy optim_grads_params",
    ],
}


def megatron_command(found: Plan) -> str:
    """A torchrun launch of Megatron-LM's pretrain_gpt.py on every node with the plan's degrees
    (the rank's MASTER_ADDR, MASTER_PORT and NODE_RANK come from the cluster's environment).
    The data, tokenizer and schedule arguments are the user's to add."""
    shape, hw = found.shape, found.hardware
    launch = [
        "torchrun",
        f"--nnodes {hw.node_count}",
        f"--nproc_per_node {hw.gpus_per_node}",
        '--node_rank "$NODE_RANK"',
        '--master_addr "$MASTER_ADDR"',
        '--master_port "${MASTER_PORT:-29500}"',
        "pretrain_gpt.py",
    ]
    args = [
        f"--tensor-model-parallel-size {found.tensor_parallel}",
        f"--pipeline-model-parallel-size {found.pipeline_parallel}",
        f"--num-layers {shape.num_layers}",
        f"--hidden-size {shape.hidden_size}",
        f"--num-attention-heads {shape.heads}",
        f"--seq-length {shape.seq_length}",
        f"--max-position-embeddings {shape.seq_length}",
        f"--micro-batch-size {shape.micro_batch_size}",
        f"--global-batch-size {found.global_batch_size}",
        "--bf16",
        "--recompute-granularity selective",
        *(["--sequence-parallel"] if found.tensor_parallel > 1 else []),
        *_ZERO_FLAGS[found.zero_stage],
    ]
    return " \\\n  ".join([" ".join(launch[:3]), *launch[3:], *args])


class GpuChoice(NamedTuple):
    """A GPU model a plan can be made for."""

    name: str
    memory_gb: int
    per_node: int  # GPUs per whole node: its active whole-node offering's, or the default
    offering: str | None  # that offering's id, which a cluster of the plan is ordered with


def gpu_models() -> dict[str, GpuChoice]:
    """GPU models a plan can be made for, by id."""
    whole_node = {
        model_id: (gpus, offering_id)
        for model_id, offering_id, gpus in Offering.objects.filter(
            kind=OfferingKind.BARE_METAL, active=True
        )
        .order_by("-sort", "-gpu_count")
        .values_list("gpu_model_id", "id", "gpu_count")
    }
    return {
        model.id: GpuChoice(
            model.name, model.memory_gb, *whole_node.get(model.id, (DEFAULT_GPUS_PER_NODE, None))
        )
        for model in GpuModel.objects.order_by("id")
    }


class PlanInputError(Exception):
    """The input cannot be planned: messages by field."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{name}: {text}" for name, text in errors.items()))
        self.errors = errors


FIELDS = (
    "params_b",
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "seq_length",
    "micro_batch_size",
)


def plan_inputs(data: dict[str, Any]) -> tuple[Shape, Hardware, Pins]:
    """The planner's inputs from validated fields (the API's and the page's): a preset's shape
    under whatever fields are given, the GPU model and node count, and any pinned degrees.
    Raises PlanInputError naming each field that is missing or does not suit the others."""
    given = {name: value for name, value in data.items() if value is not None}
    values: dict[str, Any] = {**PRESETS.get(given.get("preset") or "", {}), **given}
    errors = {
        name: _("This field is required.")
        for name in (*FIELDS[:3], *FIELDS[4:], "gpu_model", "node_count")
        if values.get(name) is None
    }
    most = settings.CLUSTER_MAX_NODES
    if values.get("node_count") is not None and not 1 <= values["node_count"] <= most:
        errors["node_count"] = _("Choose 1 to %(most)d nodes.") % {"most": most}
    known = gpu_models()
    if values.get("gpu_model") is not None and values["gpu_model"] not in known:
        errors["gpu_model"] = _("Unknown GPU model.")
    if errors:
        raise PlanInputError(errors)
    shape = Shape(
        params_b=values["params_b"],
        num_layers=values["num_layers"],
        hidden_size=values["hidden_size"],
        seq_length=values["seq_length"],
        micro_batch_size=values["micro_batch_size"],
        num_attention_heads=values.get("num_attention_heads"),
    )
    name, memory_gb, per_node, _offering = known[values["gpu_model"]]
    hardware = Hardware(name, memory_gb, per_node, values["node_count"])
    pins = Pins(
        values.get("tensor_parallel"), values.get("pipeline_parallel"), values.get("zero_stage")
    )
    errors = check(shape, hardware, pins)
    if errors:
        raise PlanInputError(errors)
    return shape, hardware, pins
