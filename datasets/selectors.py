from django.db.models import Q, QuerySet

from datasets.models import PublicDataset

MAX_QUERY_LENGTH = 100
MAX_QUERY_WORDS = 8


def public_datasets(*, kind: str | None = None, query: str = "") -> QuerySet[PublicDataset]:
    """Active entries of the pool in catalog order. `kind` keeps datasets or models; `query`
    keeps entries where every word of it appears (any case) in the name, id, description or
    tags, so "llama 70b" finds Llama 3 70B."""
    rows = PublicDataset.objects.filter(active=True)
    if kind:
        rows = rows.filter(kind=kind)
    for word in query[:MAX_QUERY_LENGTH].split()[:MAX_QUERY_WORDS]:
        rows = rows.filter(
            Q(name__icontains=word)
            | Q(id__icontains=word)
            | Q(description__icontains=word)
            | Q(tags__icontains=word)
        )
    return rows


def public_dataset_get(dataset_id: str) -> PublicDataset | None:
    """An active entry by id; inactive ones are as absent as unknown ones."""
    return PublicDataset.objects.filter(active=True, pk=dataset_id).first()
