"""Money is an integer number of fen (¥0.01). This module is the one place that turns fen into
text for people and text from people into fen; nothing here ever goes through a float."""

import re

_AMOUNT = re.compile(r"^(?P<sign>-)?(?P<yuan>\d{1,12})(?:\.(?P<fen>\d{1,2}))?$")


class MoneyParseError(ValueError):
    pass


def format_fen(amount_fen: int, *, symbol: bool = True, sign: bool = False) -> str:
    """12345678 → '¥123,456.78'; negative amounts keep their minus before the symbol."""
    if isinstance(amount_fen, bool) or not isinstance(amount_fen, int):
        raise TypeError(f"amount_fen must be an int, got {type(amount_fen).__name__}")
    prefix = "-" if amount_fen < 0 else ("+" if sign and amount_fen > 0 else "")
    yuan, fen = divmod(abs(amount_fen), 100)
    return f"{prefix}{'¥' if symbol else ''}{yuan:,}.{fen:02d}"


def parse_fen(text: str) -> int:
    """'¥1,234.5' / '1234.50' / '-3' → fen. Refuses more than two decimals and anything else."""
    cleaned = text.strip().replace("¥", "").replace("￥", "").replace(",", "").replace(" ", "")
    if cleaned.startswith("+"):
        cleaned = cleaned[1:]
    match = _AMOUNT.match(cleaned)
    if not match:
        raise MoneyParseError(f"{text!r} is not an amount in yuan such as 123.45")
    fen = int(match["yuan"]) * 100 + int((match["fen"] or "0").ljust(2, "0"))
    return -fen if match["sign"] else fen
