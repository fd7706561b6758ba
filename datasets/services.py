from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from datasets.models import PublicDataset
from starverse.core.errors import InvalidInput


def public_dataset_upsert(
    *,
    dataset_id: str,
    values: Mapping[str, Any],
    initial: Mapping[str, Any] | None = None,
) -> tuple[PublicDataset, bool]:
    """Create or update one entry of the pool by id, validated as the admin validates it.

    `values` are written every time; `initial` only when the entry is new, so what operators
    decide in the admin (hiding an entry, its place in the list) survives a re-seed."""
    candidate = PublicDataset(id=dataset_id, **{**(initial or {}), **values})
    try:
        # Uniqueness is left to the database's constraints, which also hold under races.
        candidate.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as error:
        raise InvalidInput(f"{dataset_id}: {'; '.join(error.messages)}") from None
    cleaned = {field: getattr(candidate, field) for field in values}
    create = {field: getattr(candidate, field) for field in initial or {}}
    with transaction.atomic():
        return PublicDataset.objects.update_or_create(
            id=dataset_id, defaults=cleaned, create_defaults={**create, **cleaned}
        )
