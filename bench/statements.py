"""statement_pdf_lines: how fast a monthly statement's PDF is drawn, in ledger lines a second.

Per-minute billing posts a ledger line a minute for each running instance, so one instance
running the whole month is 43,200 lines, and the statement lists every one. The statement is
built in memory (no database: what is measured is the drawing) and drawn twice in the same run:

- ours: billing.documents.statement_pdf, which places each row's text by position;
- baseline: the same summary and rows drawn with fpdf2's cell() per column, the way the PDF was
  drawn before (cells lay out each text as styled runs).

Printed: lines/s of ours next to the baseline's (goal: ratio >= 2)."""

import time
from datetime import date, datetime, timedelta
from typing import Any

from bench.common import report, setup_django

LINES = 43_200  # one instance, a 30-day month, a line a minute
MONTH = date(2026, 11, 1)


def statement_of_minutes(count: int) -> Any:
    """A month's StatementData, in memory, of `count` per-minute usage lines of one instance
    (also the statement tests' long statement)."""
    from zoneinfo import ZoneInfo

    from billing.choices import TransactionKind
    from billing.models import LedgerTransaction
    from billing.statements import Balances, StatementData
    from billing.usage import UsageReport

    start = datetime(2026, 11, 1, tzinfo=ZoneInfo("Asia/Shanghai"))
    lines = [
        LedgerTransaction(
            created_at=start + timedelta(minutes=minute),
            kind=TransactionKind.USAGE,
            description="Instance usage",
            instance_id="ins_AbCdEfGhIjKlMnOpQrSt",
            amount_fen=-37,
            cash_after_fen=2_000_000 - 37 * minute,
            promo_after_fen=0,
            arrears_after_fen=0,
        )
        for minute in range(count)
    ]
    zero = Balances(0, 0, 0)
    return StatementData("tnt_bench", MONTH, zero, zero, lines, UsageReport(MONTH, MONTH, "day"))


def _cells_pdf(data: Any) -> bytes:
    """The baseline: the statement's rows as fpdf2 cells, one per column."""
    from fpdf import FPDF

    from billing import documents

    pdf = FPDF(orientation="P", unit="mm", format="A4")
    pdf.set_auto_page_break(auto=True, margin=12)
    pdf.set_margins(10, 10, 10)
    pdf.add_font("cjk", fname=documents.font_path(), collection_font_number=0)
    pdf.add_page()
    pdf.set_font("cjk", size=6.5)
    widths = (30, 25, 45, 35, 24, 31)
    for cells in documents._line_cells(data):
        for index, (text, width) in enumerate(zip(cells, widths, strict=True)):
            last = index == len(widths) - 1
            pdf.cell(
                width,
                4,
                documents._fit(pdf, text, width)[0],
                align="R" if index >= 4 else "L",
                new_x="LMARGIN" if last else "RIGHT",
                new_y="NEXT" if last else "TOP",
            )
    return bytes(pdf.output())


def run() -> list[dict]:
    setup_django()
    from billing.documents import statement_pdf

    data = statement_of_minutes(LINES)
    began = time.perf_counter()
    ours = statement_pdf(data)
    ours_s = time.perf_counter() - began
    began = time.perf_counter()
    baseline = _cells_pdf(data)
    baseline_s = time.perf_counter() - began
    assert ours.startswith(b"%PDF-") and baseline.startswith(b"%PDF-")
    return [
        report(
            "statement_pdf_lines",
            LINES / ours_s,
            "lines/s",
            LINES / baseline_s,
            f"fpdf2 cells, the same {LINES:,} lines",
            "ratio >= 2",
        )
    ]
