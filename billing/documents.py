"""Statements as files: a PDF (fpdf2, with a CJK font: STATEMENT_FONT) and a CSV in UTF-8
with a byte-order mark, which Excel in China opens without garbling. Labels are in Simplified
Chinese and English, like the e-mails."""

import io
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone, translation
from django.utils.functional import Promise
from django.utils.translation import gettext, gettext_noop

from billing.choices import TransactionKind
from starverse.core.money import format_fen
from starverse.core.spreadsheets import csv_writer

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise
    from fpdf import FPDF

    from billing.statements import StatementData

LANGUAGES = ("zh-hans", "en")
LINE_COLUMNS = (
    gettext_noop("Time"),
    gettext_noop("Type"),
    gettext_noop("Description"),
    gettext_noop("Instance"),
    gettext_noop("Amount"),
    gettext_noop("Balance after"),
)
USAGE_COLUMNS = (
    gettext_noop("Instance or volume"),
    gettext_noop("Minutes"),
    gettext_noop("GPU hours"),
    gettext_noop("Amount"),
)


def both(text: "StrOrPromise") -> str:
    """`text` (a message id, or a lazy translation such as a choice's label) in Chinese and
    English ("时间 / Time"), once where they are the same."""
    seen: list[str] = []
    for language in LANGUAGES:
        with translation.override(language):
            translated = str(text) if isinstance(text, Promise) else gettext(text)
        if translated not in seen:
            seen.append(translated)
    return " / ".join(seen)


def _kind(kind: str) -> str:
    return both(TransactionKind(kind).label)


def _when(value: datetime) -> str:
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S")


def _summary(data: "StatementData") -> list[tuple[str, str]]:
    return [
        (both(gettext_noop("Account")), data.tenant_id),
        (both(gettext_noop("Month")), f"{data.month:%Y-%m}"),
        *(
            [(both(gettext_noop("Month to date, not final: as of")), _when(data.as_of))]
            if data.as_of is not None
            else []
        ),
        (both(gettext_noop("Opening balance")), format_fen(data.opening.total_fen)),
        (both(gettext_noop("Cash")), format_fen(data.opening.cash_fen)),
        (both(gettext_noop("Trial credit")), format_fen(data.opening.promo_fen)),
        (both(gettext_noop("Credits")), format_fen(data.credits_fen)),
        (both(gettext_noop("Debits")), format_fen(data.debits_fen)),
        (both(gettext_noop("Closing balance")), format_fen(data.closing.total_fen)),
        (both(gettext_noop("Cash")), format_fen(data.closing.cash_fen)),
        (both(gettext_noop("Trial credit")), format_fen(data.closing.promo_fen)),
    ]


def _line_cells(data: "StatementData") -> list[list[str]]:
    # a busy month has tens of thousands of lines with a handful of kinds and descriptions:
    # each is translated once
    kinds: dict[str, str] = {}
    descriptions: dict[str, str] = {}
    return [
        [
            _when(t.created_at),
            kinds.get(t.kind) or kinds.setdefault(t.kind, _kind(t.kind)),
            descriptions.get(t.description)
            or descriptions.setdefault(t.description, both(t.description)),
            t.instance_id,
            format_fen(t.amount_fen, sign=True),
            format_fen(t.balance_after_fen),
        ]
        for t in data.lines
    ]


def _usage_cells(data: "StatementData") -> list[list[str]]:
    rows = [*data.usage.rows, data.usage.totals]
    return [
        [row.label, str(row.minutes), f"{row.gpu_hours:.2f}", format_fen(row.amount_fen)]
        for row in rows
    ]


def statement_csv(data: "StatementData") -> bytes:
    """Three blocks: the summary, every ledger line, usage by instance and volume."""
    out = io.StringIO()
    writer = csv_writer(out)
    title = both(gettext_noop("Starverse monthly statement"))
    writer.writerow([title, f"{data.month:%Y-%m}"])
    writer.writerows(_summary(data))
    writer.writerow([])
    # Amounts in the CSV are plain yuan numbers, so that spreadsheets can add them up.
    writer.writerow([both(c) for c in LINE_COLUMNS] + ["ID"])
    for t in data.lines:
        writer.writerow(
            [
                _when(t.created_at),
                _kind(t.kind),
                both(t.description),
                t.instance_id,
                format_fen(t.amount_fen, symbol=False).replace(",", ""),
                format_fen(t.balance_after_fen, symbol=False).replace(",", ""),
                t.id,
            ]
        )
    writer.writerow([])
    writer.writerow([both(c) for c in USAGE_COLUMNS])
    for row in [*data.usage.rows, data.usage.totals]:
        writer.writerow(
            [
                row.label,
                row.minutes,
                f"{row.gpu_hours:.2f}",
                format_fen(row.amount_fen, symbol=False).replace(",", ""),
            ]
        )
    return out.getvalue().encode("utf-8-sig")


def font_path() -> str:
    path = settings.STATEMENT_FONT
    if not Path(path).is_file():
        raise ImproperlyConfigured(
            f"STATEMENT_FONT {path!r} is not a file: statements need a CJK TrueType font "
            "(Debian/Ubuntu: apt-get install fonts-wqy-microhei)."
        )
    return str(path)


def summary_label_width(pdf: "FPDF", summary: list[tuple[str, str]]) -> float:
    """The summary's label column, in mm: wide enough for its longest label in both languages
    (the month so far's "Month to date, not final: as of" ran over its date), 60 at least."""
    return max(60.0, *(pdf.get_string_width(label) + 4 for label, _value in summary))


def statement_pdf(data: "StatementData") -> bytes:
    from fpdf import FPDF  # imported when a statement is drawn: it is slow to import

    pdf = FPDF(orientation="P", unit="mm", format="A4")
    pdf.set_auto_page_break(auto=True, margin=12)
    pdf.set_margins(10, 10, 10)
    # collection_font_number: the first face of a .ttc (ignored for a single .ttf)
    pdf.add_font("cjk", fname=font_path(), collection_font_number=0)
    pdf.add_page()
    pdf.set_font("cjk", size=14)
    pdf.cell(0, 8, both(gettext_noop("Starverse monthly statement")), new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("cjk", size=9)
    summary = _summary(data)
    width = summary_label_width(pdf, summary)
    for label, value in summary:
        pdf.cell(width, 5, label)
        pdf.cell(0, 5, value, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(3)
    _table(pdf, [both(c) for c in USAGE_COLUMNS], _usage_cells(data), (90, 25, 35, 40))
    pdf.ln(3)
    widths = (30, 25, 45, 35, 24, 31)
    _table(pdf, [both(c) for c in LINE_COLUMNS], _line_cells(data), widths, size=6.5)
    return bytes(pdf.output())


ROW_MM = 4.0
BOTTOM_MM = 12.0


def _table(
    pdf: "FPDF", header: list[str], rows: list[list[str]], widths: tuple[int, ...], size: float = 8
) -> None:
    """Rows of plain text placed by position, the header again at the top of every page: not
    fpdf's table() nor its cells, which lay out each cell's text as styled runs (a busy month
    has tens of thousands of lines; text() draws one about five times as fast)."""
    numeric = {len(widths) - 1, len(widths) - 2}
    pdf.set_font("cjk", size=size)
    baseline = ROW_MM * 0.75

    def row(cells: list[str]) -> None:
        if pdf.get_y() + ROW_MM > pdf.h - BOTTOM_MM:
            pdf.add_page()
            heading()
        x, y = pdf.l_margin, pdf.get_y()
        for index, (text, width) in enumerate(zip(cells, widths, strict=True)):
            shown, shown_width = _fit(pdf, text, width)
            left = x + width - 0.5 - shown_width if index in numeric else x + 0.5
            pdf.text(left, y + baseline, shown)
            x += width
        pdf.set_y(y + ROW_MM)

    def heading() -> None:
        row(header)
        pdf.line(pdf.l_margin, pdf.get_y(), pdf.w - pdf.r_margin, pdf.get_y())

    heading()
    for cells in rows:
        row(cells)


def _fit(pdf: "FPDF", text: str, width: float) -> tuple[str, float]:
    """`text` cut with an ellipsis to fit `width` (less a millimetre), and its width."""
    measured = pdf.get_string_width(text)
    if measured <= width - 1:
        return text, measured
    while text and pdf.get_string_width(text + "…") > width - 1:
        text = text[:-1]
    return text + "…", pdf.get_string_width(text + "…")
