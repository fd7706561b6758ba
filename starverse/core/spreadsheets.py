"""CSV files people open in a spreadsheet (usage, statements, the team audit), written through
one writer that keeps a cell from being read as a formula.

Excel, LibreOffice and Numbers run a cell that starts with `=`, `+`, `-` or `@` (and some a
tab or carriage return) as a formula: an instance named `=HYPERLINK(...)` would become a
link, or worse, in the spreadsheet of whoever downloads the file. Such a text cell gets a
leading `'` (OWASP's CSV injection advice), which spreadsheets show as text. Numbers stay
numbers: a cell that is not a string (an int, say) is written as it is, and so is a string
that is a plain number, `-12.00` or `-¥1,234.56` (the amounts we write, bare or as people
read them), so that a column of amounts still adds up; a number carries no formula."""

import csv
import re
from collections.abc import Iterable
from typing import IO, Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# a sign, the yuan sign, digits (in thousands or not), decimals: nothing a formula is made of
PLAIN_NUMBER = re.compile(r"[+-]?[¥￥]?([0-9]{1,3}(,[0-9]{3})+|[0-9]+)(\.[0-9]+)?")


def safe_cell(value: Any) -> Any:
    """The cell as a spreadsheet must read it: text that would start a formula, quoted."""
    if (
        isinstance(value, str)
        and value.startswith(FORMULA_STARTS)
        and not PLAIN_NUMBER.fullmatch(value)
    ):
        return "'" + value
    return value


class SafeWriter:
    """csv.writer's writerow and writerows, each cell through safe_cell."""

    def __init__(self, out: IO[str]) -> None:
        self._writer = csv.writer(out)

    def writerow(self, row: Iterable[Any]) -> None:
        self._writer.writerow([safe_cell(value) for value in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def csv_writer(out: IO[str]) -> SafeWriter:
    """The one CSV writer of product code."""
    return SafeWriter(out)
