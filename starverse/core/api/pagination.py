from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.paginator import InvalidPage, Page
from django.core.paginator import Paginator as DjangoPaginator
from django.utils.functional import cached_property
from rest_framework.exceptions import NotFound
from rest_framework.pagination import BasePagination, PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response


def envelope_schema(results: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI schema of every list answer: all four keys are always sent."""
    link = {"type": "string", "format": "uri", "nullable": True}
    return {
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "next": link,
            "previous": link,
            "results": results,
        },
        "required": ["count", "next", "previous", "results"],
    }


# The furthest row a page may start at: a bigint OFFSET, so that an absurd `?page=` is a 404
# rather than a number the database refuses.
MAX_OFFSET = 2**63 - 1

# django-stubs makes Paginator generic in its rows; Django's class takes no type arguments.
if TYPE_CHECKING:
    _Paginator = DjangoPaginator[Any]
else:
    _Paginator = DjangoPaginator


class _CountedPaginator(_Paginator):
    """A Paginator told its total instead of counting rows: the page's rows and the total come
    from one query (paginate_fetched), so its object list is never read."""

    def __init__(self, total: int, per_page: int) -> None:
        super().__init__([], per_page)
        self.total = total

    @cached_property
    def count(self) -> int:
        return self.total


class Pagination(PageNumberPagination):
    """`{count, next, previous, results}`; `?page=` and `?page_size=` up to 200."""

    page_size_query_param = "page_size"
    max_page_size = 200

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return envelope_schema(schema)

    def paginate_fetched(
        self, request: Request, fetch: Callable[[int, int], tuple[int | None, list[Any]]]
    ) -> list[Any]:
        """Paginate rows that `fetch(limit, offset)` reads together with their total (None
        when the page is past the end), then answer with get_paginated_response as usual."""
        size = self.get_page_size(request) or 1
        raw = request.query_params.get(self.page_query_param) or 1
        try:
            number = int(raw)
            if number < 1 or (number - 1) * size > MAX_OFFSET:
                raise InvalidPage
            total, items = fetch(size, (number - 1) * size)
            paginator = _CountedPaginator(total or 0, size)
            paginator.validate_number(number)
        except (ValueError, InvalidPage) as error:
            raise NotFound(
                self.invalid_page_message.format(page_number=raw, message=str(error))
            ) from None
        self.request = request
        self.page = Page(items, number, paginator)
        return items


class WholeList(BasePagination):
    """The list envelope around a short list that is never paged (the catalog, an instance's
    events): `next` and `previous` are always null and `?page=` is not read."""

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> list[Any]:
        return list(queryset)

    def get_paginated_response(self, data: Any) -> Response:
        return Response({"count": len(data), "next": None, "previous": None, "results": data})

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return envelope_schema(schema)
