from typing import Any

import pytest

from datasets.models import PublicDataset
from datasets.services import public_dataset_upsert


def make_entry(dataset_id: str, **values: Any) -> PublicDataset:
    defaults: dict[str, Any] = {
        "kind": "dataset",
        "name": dataset_id,
        "version": "1",
        "size_bytes": 1_000,
        "licence": "MIT",
        "directory": dataset_id,
        "description": "",
    }
    entry, _created = public_dataset_upsert(dataset_id=dataset_id, values={**defaults, **values})
    return entry


@pytest.fixture
def pool(db: Any) -> dict[str, PublicDataset]:
    """A model, a dataset, and a hidden dataset that must never show."""
    return {
        "llama": make_entry(
            "llama-3-8b-instruct",
            kind="model",
            name="Llama 3 8B Instruct",
            version="3.0",
            size_bytes=16_060_522_496,
            licence="Llama 3 Community License",
            directory="Meta-Llama-3-8B-Instruct",
            homepage="https://example.org/llama",
            tags="llm, chat, english",
            description="Meta's 8B instruction-tuned model.",
            sort=1,
        ),
        "belle": make_entry(
            "belle-instructions",
            name="BELLE instruction sets",
            version="2023-04",
            size_bytes=5_621_293_056,
            licence="GPL-3.0 (research use only)",
            directory="BELLE",
            tags="sft, chinese, 中文",
            description="Generated Chinese instruction data for fine-tuning.",
            sort=2,
        ),
        "hidden": make_entry(
            "retired-corpus",
            name="Retired corpus",
            directory="retired",
            tags="chinese",
            description="Withdrawn by its authors.",
            active=False,
        ),
    }
