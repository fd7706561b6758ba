"""Sizes for people, in one form everywhere (image pulls in a timeline, datasets, endpoint
sources, the admin): decimal units as registries, model hubs and disk vendors print them, one
place after the point, rounded half up."""

from decimal import ROUND_HALF_UP, Decimal

UNITS = ("B", "kB", "MB", "GB", "TB", "PB")


def format_size(size_bytes: int) -> str:
    """`15_000_000_000` → "15.0 GB", `1_250` → "1.3 kB"; below 1 kB whole bytes. A value that
    rounds to 1000 of a unit is read in the next ("1.0 GB", never "1000.0 MB")."""
    if size_bytes < 1000:
        return f"{size_bytes} B"
    value, unit = Decimal(size_bytes) / 1000, 1
    while _tenth(value) >= 1000 and unit < len(UNITS) - 1:
        value, unit = value / 1000, unit + 1
    return f"{_tenth(value)} {UNITS[unit]}"


def _tenth(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
