"""The API's one JSON parser: it refuses, with 400, what would otherwise reach a serializer or
the database and fail there with a 500 — nesting deeper than any request needs, NUL bytes
(PostgreSQL cannot store them in text), lone surrogates (not encodable as UTF-8), and numbers
too large for a float (`1e400` would parse as infinity)."""

import codecs
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext as _
from rest_framework import parsers
from rest_framework.exceptions import ParseError

# No request body of this API nests beyond a few levels; the limit leaves room for any
# reasonable client while keeping the walk below cheap and far below Python's recursion limit.
MAX_DEPTH = 32
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"number out of range: {text[:40]}")
    return number


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _too_deep() -> str:
    return _("JSON nested deeper than %(depth)d levels.") % {"depth": MAX_DEPTH}


def _check(data: Any) -> None:
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _UNSTORABLE.search(value):
                raise ParseError(_("JSON strings must not contain NUL bytes or lone surrogates."))
        elif isinstance(value, dict | list):
            if depth >= MAX_DEPTH:
                raise ParseError(_too_deep())
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str):
                    stack.append((key, depth))
                stack.append((item, depth + 1))


def load(stream: Any, encoding: str = "utf-8") -> Any:
    """Parse a JSON byte stream, refusing (ParseError) what the module docstring names."""
    try:
        data = json.load(
            codecs.getreader(encoding)(stream),
            parse_constant=_refuse_constant,
            parse_float=_finite,
        )
    except RecursionError:
        raise ParseError(_too_deep()) from None
    except ValueError as error:
        raise ParseError(_("JSON parse error - %(error)s") % {"error": error}) from None
    _check(data)
    return data


class JSONParser(parsers.JSONParser):
    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        return load(stream, parsers.get_encoding(parser_context or {}))  # type: ignore[attr-defined]
