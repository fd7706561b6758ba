"""The console's page of the public pool: search, filter by kind, and the command to copy."""

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from datasets.choices import MOUNT_ROOTS, DatasetKind
from datasets.models import PublicDataset
from datasets.selectors import MAX_QUERY_LENGTH, public_datasets
from starverse.core.sizes import format_size

PAGE_SIZE = 50


@login_required
def dataset_list(request: HttpRequest) -> HttpResponse:
    kind = request.GET.get("kind", "")
    kind = kind if kind in DatasetKind.values else ""  # an unknown kind shows everything
    query = request.GET.get("q", "").strip()[:MAX_QUERY_LENGTH]
    page = Paginator(public_datasets(kind=kind or None, query=query), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    entries: list[PublicDataset] = list(page.object_list)
    filters = {key: value for key, value in (("q", query), ("kind", kind)) if value}
    return render(
        request,
        "datasets/list.html",
        {
            "page": page,
            "rows": [{"entry": entry, "size": format_size(entry.size_bytes)} for entry in entries],
            "query": query,
            "kind": kind,
            "kinds": DatasetKind.choices,
            "filtered": bool(filters),
            "page_query": urlencode(filters),
            "data_root": MOUNT_ROOTS[DatasetKind.DATASET],
            "model_root": MOUNT_ROOTS[DatasetKind.MODEL],
            "active": "datasets",
        },
    )
