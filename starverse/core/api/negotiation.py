"""The API's content negotiation: DRF's, except that a `?format=` naming no media type of the
route is a 406, as an Accept header naming none is, rather than a 404 (the route exists)."""

from collections.abc import Iterable

from rest_framework import exceptions, negotiation
from rest_framework.renderers import BaseRenderer


class ContentNegotiation(negotiation.DefaultContentNegotiation):
    def filter_renderers(
        self, renderers: Iterable[BaseRenderer], format: str
    ) -> list[BaseRenderer]:
        offered = list(renderers)
        matching = [renderer for renderer in offered if renderer.format == format]
        if not matching:
            raise exceptions.NotAcceptable(available_renderers=offered)
        return matching
