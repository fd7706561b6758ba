from typing import Any

from django.core.management.base import BaseCommand

from compute.models import Image, Offering
from fleet.models import GpuModel, NodeProfile
from storage.models import StoragePrice

GPU_MODELS = [
    # id, name, NVML product, memory GB, interconnect, premium (the dearest: TRIAL_MAX_PREMIUM_GPUS)
    ("h100-80g", "H100 80GB SXM", "NVIDIA H100 80GB HBM3", 80, "nvlink", True),
    ("a100-80g", "A100 80GB SXM", "NVIDIA A100-SXM4-80GB", 80, "nvlink", True),
    ("rtx4090", "RTX 4090 24GB", "NVIDIA GeForce RTX 4090", 24, "pcie", False),
]
# model, per-GPU hourly price (fen), whole-node hourly and monthly price (fen) or None,
# per-GPU share of the node's CPU cores, RAM GB and local NVMe GB. Eight shares fit the seeded
# (emulated) nodes' allocatable, which is capacity less the kubelet's reservations (2 cores,
# 16 GiB): 8 × 23 ≤ 190 cores on H100 nodes, 8 × 15 ≤ 126 on A100, 8 × 7 ≤ 62 on RTX 4090.
# Pre-flight floors (bus bandwidth, GB/s as nccl-tests prints it) of the whole-node offerings:
# 8×400G InfiniBand H100 nodes reach ~350-390 under one leaf switch, A100 (8×200G) ~180.
PREFLIGHT_FLOORS = {"h100-80g": 300.0, "a100-80g": 150.0}
PRICING = {
    "h100-80g": (2200, 16000, 12_800_000, 23, 240, 1000),
    "a100-80g": (850, 6400, 3_800_000, 15, 120, 500),
    "rtx4090": (220, None, None, 7, 60, 250),
}
# The trial (docs/user-guide.md, "The trial"): ¥10 of trial credit buys one hour of a whole 8×H100
# node or twelve of a single A100 (83 fen × 12 h = ¥9.96), enough for one 7B fine-tune. The RTX 4090
# offerings, which trial accounts could always rent, take it at their standard price. The
# other H100 and A100 offerings have none: trial credit is not spent on them.
TRIAL_PRICES = {
    "h100-80g-bare-metal": 1000,
    "a100-80g-x1": 83,
    **{f"rtx4090-x{n}": 220 * n for n in (1, 2, 4, 8)},
}


def offering_rows() -> list[tuple[str, str, str, str, int]]:
    """(slug, English name, 简体中文 name, GPU model, GPU count) of every seeded offering."""
    rows = []
    for key, name, *_rest in GPU_MODELS:
        if PRICING[key][1]:
            rows.append(
                (f"{key}-bare-metal", f"8× {name} bare metal", f"8× {name} 裸金属整机", key, 8)
            )
        for count in (1, 2, 4, 8):
            rows.append(
                (f"{key}-x{count}", f"{count}× {name}", f"{count}× {name} 云 GPU", key, count)
            )
    return rows


# Node profiles of the seeded (emulated) fleet's pools: an RDMA shared-device plugin's resource
# and the NCCL settings of an InfiniBand fabric (docs/operator-guide.md, node profiles).
NCCL_IB = {
    "NCCL_IB_HCA": "mlx5",
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_NET_GDR_LEVEL": "PXB",
}
NODE_PROFILES = [
    ("h100-ib", "NVIDIA-H100-80GB-HBM3"),
    ("a100-ib", "NVIDIA-A100-SXM4-80GB"),
]
# Per GB-day in fen: a 100 GB cloud disk costs ¥1/day (¥30/month); the shared NAS ¥2/day.
STORAGE_PRICES = {"disk": 1, "nas": 2, "image": 1}
# The images of deploy/images (built by its build.sh): each reference is a tag of its
# matrix.yaml, which says what versions it has. What a node pulls of each (compressed layers,
# the registry's size; CUDA devel bases are most of it) and whether every node keeps it.
IMAGE_PULLS = {
    "pytorch-2.1": (18_000_000_000, True),
    "deepspeed-0.12": (19_000_000_000, False),
    "megatron-lm": (21_000_000_000, False),
    "colossalai-0.3": (19_000_000_000, False),
    "tensorrt-llm-0.7": (25_000_000_000, False),
    "tensorrt-llm-serve-0.17": (24_000_000_000, False),
    "vllm-0.6": (12_000_000_000, False),
}
IMAGES = [
    (
        "pytorch-2.1",
        "PyTorch 2.1 · CUDA 12.1 · NCCL 2.18",
        "Ubuntu 22.04, CUDA 12.1, cuDNN 8.9, PyTorch 2.1.2, NCCL 2.18.1, JupyterLab 4, SSH.",
        "starverse/pytorch:2.1-cuda12.1",
    ),
    (
        "deepspeed-0.12",
        "DeepSpeed 0.12 (PyTorch 2.1)",
        "The PyTorch 2.1 base with DeepSpeed 0.12.6 and FlashAttention 2.",
        "starverse/deepspeed:0.12-pytorch2.1",
    ),
    (
        "megatron-lm",
        "Megatron-LM (PyTorch 2.1)",
        "The PyTorch 2.1 base with Megatron-LM core 0.4 and Transformer Engine 1.2 for 3D "
        "parallelism.",
        "starverse/megatron-lm:core0.4-pytorch2.1",
    ),
    (
        "colossalai-0.3",
        "Colossal-AI 0.3 (PyTorch 2.1)",
        "The PyTorch 2.1 base with Colossal-AI 0.3.4.",
        "starverse/colossalai:0.3-pytorch2.1",
    ),
    (
        "tensorrt-llm-0.7",
        "TensorRT-LLM 0.7 (inference)",
        "CUDA 12.2 with TensorRT-LLM 0.7.1 and the Triton client, for LLM inference.",
        "starverse/tensorrt-llm:0.7-cuda12.2",
    ),
    # The inference endpoints' engines (settings ENDPOINT_IMAGE_*): their entry point serves
    # the model at /model; as an instance the platform's init runs instead, as in every image.
    (
        "tensorrt-llm-serve-0.17",
        "TensorRT-LLM 0.17 server (endpoints)",
        "CUDA 12.8 with TensorRT-LLM 0.17.0 and trtllm-serve: the engine of inference endpoints.",
        "starverse/tensorrt-llm-serve:0.17-cuda12.8",
    ),
    (
        "vllm-0.6",
        "vLLM 0.6 server (endpoints)",
        "CUDA 12.1 with vLLM 0.6.3 and PyTorch 2.4: the engine of inference endpoints.",
        "starverse/vllm:0.6-cuda12.1",
    ),
]

# id → (name, description) in Simplified Chinese.
IMAGES_ZH = {
    "pytorch-2.1": (
        "PyTorch 2.1 · CUDA 12.1 · NCCL 2.18",
        "Ubuntu 22.04，CUDA 12.1、cuDNN 8.9、PyTorch 2.1.2、NCCL 2.18.1、JupyterLab 4，支持 SSH。",
    ),
    "deepspeed-0.12": (
        "DeepSpeed 0.12（PyTorch 2.1）",
        "在 PyTorch 2.1 基础镜像上加装 DeepSpeed 0.12.6 与 FlashAttention 2。",
    ),
    "megatron-lm": (
        "Megatron-LM（PyTorch 2.1）",
        "在 PyTorch 2.1 基础镜像上加装 Megatron-LM core 0.4 与 Transformer Engine 1.2，"
        "用于 3D 并行训练。",
    ),
    "colossalai-0.3": (
        "Colossal-AI 0.3（PyTorch 2.1）",
        "在 PyTorch 2.1 基础镜像上加装 Colossal-AI 0.3.4。",
    ),
    "tensorrt-llm-0.7": (
        "TensorRT-LLM 0.7（推理）",
        "CUDA 12.2，含 TensorRT-LLM 0.7.1 与 Triton 客户端，用于大语言模型推理。",
    ),
    "tensorrt-llm-serve-0.17": (
        "TensorRT-LLM 0.17 服务（推理端点）",
        "CUDA 12.8，含 TensorRT-LLM 0.17.0 与 trtllm-serve：推理端点的引擎。",
    ),
    "vllm-0.6": (
        "vLLM 0.6 服务（推理端点）",
        "CUDA 12.1，含 vLLM 0.6.3 与 PyTorch 2.4：推理端点的引擎。",
    ),
}


class Command(BaseCommand):
    help = "Seed the demo catalog: GPU models, offerings and images. Safe to run repeatedly."

    def handle(self, *args: Any, **options: Any) -> None:
        prices = [StoragePrice(kind=k, price_per_gb_day_fen=f) for k, f in STORAGE_PRICES.items()]
        _missing_create(StoragePrice, "kind", prices, unique=True)
        models = [
            GpuModel(
                id=key,
                name=name,
                product=product,
                memory_gb=memory,
                interconnect=interconnect,
                premium=premium,
            )
            for key, name, product, memory, interconnect, premium in GPU_MODELS
        ]
        _missing_create(GpuModel, "id", models, unique=True)
        _missing_create(
            Offering,
            "name",
            [offering for sort, model in enumerate(models) for offering in _offerings(model, sort)],
            unique=False,  # names are not unique: a clash of slugs fails, as it always did
        )
        _missing_create(NodeProfile, "name", _node_profiles(), unique=True)
        _missing_create(Image, "id", _images(), unique=True)
        self.stdout.write(
            f"Catalog: {GpuModel.objects.count()} GPU models, "
            f"{Offering.objects.count()} offerings, {Image.objects.count()} images."
        )


def _missing_create(model: type[Any], key: str, rows: list[Any], *, unique: bool) -> None:
    """Insert the rows whose `key` no row has yet, in one statement: a row already there (an
    operator may have changed it) is left as it is. Seeding runs at every `make run` and in
    many tests, where a get_or_create per row cost ~150 queries."""
    there = set(
        model.objects.filter(**{f"{key}__in": [getattr(row, key) for row in rows]}).values_list(
            key, flat=True
        )
    )
    # On a unique key, the row of a seeding that ran meanwhile wins, as with get_or_create.
    model.objects.bulk_create(
        [row for row in rows if getattr(row, key) not in there], ignore_conflicts=unique
    )


def spot_price(hour_fen: int) -> int | None:
    """The seeded spot price of an offering: SPOT_SHARE of its hourly price, rounded to the
    fen (None where it has no hourly price)."""
    return max(1, hour_fen * SPOT_SHARE // 100) if hour_fen > 0 else None


# The seeded spot price, in percent of the hourly one (RunPod and Vast.ai sell interruptible
# GPUs at about 40–50 % of on-demand).
SPOT_SHARE = 40


def _offerings(model: GpuModel, sort: int) -> list[Offering]:
    """The offerings of one GPU model (offering_rows), priced and sized from PRICING, after
    the model's place (`sort`) in GPU_MODELS."""
    key = model.id
    per_gpu, node_hour, node_month, cores, ram, nvme = PRICING[key]
    offerings = []
    for slug, english, chinese, model_key, count in offering_rows():
        if model_key != key:
            continue
        bare = slug.endswith("-bare-metal")
        offerings.append(
            Offering(
                name=english,
                name_zh_hans=chinese,
                slug=slug,
                kind="bare_metal" if bare else "cloud",
                gpu_model=model,
                gpu_count=count,
                cpu_cores=cores * count,
                memory_gb=ram * count,
                local_disk_gb=nvme * count,
                price_per_hour_fen=(node_hour or 0) if bare else per_gpu * count,
                price_per_month_fen=node_month if bare else None,
                trial_price_per_hour_fen=TRIAL_PRICES.get(slug),
                spot_price_per_hour_fen=spot_price((node_hour or 0) if bare else per_gpu * count),
                preflight_floor_gbps=PREFLIGHT_FLOORS.get(key) if bare else None,
                sort=sort * 10 + (0 if bare else count),
            )
        )
    return offerings


def _node_profiles() -> list[NodeProfile]:
    """The seeded fleet's InfiniBand node profiles (NODE_PROFILES)."""
    return [
        NodeProfile(
            name=name,
            node_selector={"nvidia.com/gpu.product": product},
            rdma_resource="rdma/rdma_shared_device_a",
            rdma_count=1,
            nccl_env=NCCL_IB,
        )
        for name, product in NODE_PROFILES
    ]


def _images() -> list[Image]:
    """The images of deploy/images (IMAGES), with their Chinese names and what a node pulls
    of each, in IMAGES' order."""
    images = []
    for sort, (key, name, description, reference) in enumerate(IMAGES):
        size_bytes, prepull = IMAGE_PULLS[key]
        images.append(
            Image(
                id=key,
                name=name,
                name_zh_hans=IMAGES_ZH[key][0],
                description=description,
                description_zh_hans=IMAGES_ZH[key][1],
                container_image=reference,
                size_bytes=size_bytes,
                prepull=prepull,
                sort=sort,
            )
        )
    return images
