"""Sizes for people: decimal units, as model hubs and disk vendors print them."""

UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def format_size(size_bytes: int) -> str:
    """`15_000_000_000` → "15.0 GB"; below 1 KB whole bytes, above one decimal."""
    if size_bytes < 1000:
        return f"{size_bytes} B"
    value, unit = size_bytes / 1000, 1
    # Compare the rounded value, so 999.96 MB reads "1.0 GB" rather than "1000.0 MB".
    while round(value, 1) >= 1000 and unit < len(UNITS) - 1:
        value, unit = value / 1000, unit + 1
    return f"{value:.1f} {UNITS[unit]}"
