"""Human output: money from fen, tables, key/value blocks, and amounts typed in yuan."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, TextIO

_YUAN = re.compile(r"^¥?\s*(\d{1,9}(?:,\d{3})*|\d+)(?:\.(\d{1,2}))?$")


def yuan(fen: int | None) -> str:
    """`¥1,234.56` from integer fen, as the console writes it; `-` for none."""
    if fen is None:
        return "-"
    sign = "-" if fen < 0 else ""
    whole, cents = divmod(abs(int(fen)), 100)
    return f"{sign}¥{whole:,}.{cents:02d}"


def parse_yuan(text: str) -> int:
    """Fen from an amount in yuan: `100`, `100.5`, `¥1,000.50`. No floats: the digits are
    read as they are. ValueError on anything else (negative, three decimals, words)."""
    match = _YUAN.match(text.strip())
    if not match:
        raise ValueError(f"not an amount in yuan: {text!r} (e.g. 100 or 99.50)")
    whole = int(match.group(1).replace(",", ""))
    cents = int((match.group(2) or "0").ljust(2, "0"))
    return whole * 100 + cents


def width(text: str) -> int:
    """Columns a string takes in a terminal: CJK characters are two wide."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, columns: int) -> str:
    return text + " " * (columns - width(text))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO) -> None:
    """A plain left-aligned table; `None` shows as `-`."""
    cells = [[("-" if value is None else str(value)) for value in row] for row in rows]
    widths = [width(header) for header in headers]
    for row in cells:
        for index, value in enumerate(row):
            widths[index] = max(widths[index], width(value))
    for row in [list(headers), *cells]:
        line = "  ".join(_pad(value, widths[i]) for i, value in enumerate(row))
        out.write(line.rstrip() + "\n")


def fields(pairs: Sequence[tuple[str, Any]], out: TextIO) -> None:
    """`key: value` lines, the keys aligned; `None` shows as `-`."""
    if not pairs:
        return
    longest = max(width(key) for key, _ in pairs)
    for key, value in pairs:
        shown = "-" if value is None or value == "" else str(value)
        out.write(f"{_pad(key + ':', longest + 1)} {shown}\n")


def dump_json(value: Any, out: TextIO) -> None:
    out.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
