"""The one CSV writer (starverse.core.spreadsheets): a text cell a spreadsheet would run as a
formula is quoted; numbers, ours included (-12.00), stay numbers."""

import csv
import io

import pytest

from starverse.core.spreadsheets import csv_writer, safe_cell


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ('=HYPERLINK("http://evil.example","x")', '\'=HYPERLINK("http://evil.example","x")'),
        ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("-", "'-"),
        ("-1e3", "'-1e3"),
        ("-12.00", "-12.00"),
        ("-¥1,234.56", "-¥1,234.56"),
        ("+¥12.00", "+¥12.00"),
        ("-1,23", "'-1,23"),
        ("-¥", "'-¥"),
        ("+86", "+86"),
        ("12.5", "12.5"),
        ("job (ins_abc)", "job (ins_abc)"),
        ("a=b", "a=b"),
        ("", ""),
        (-1200, -1200),
        (3.5, 3.5),
        (None, None),
    ],
)
def test_a_cell_that_would_start_a_formula_is_quoted_and_numbers_are_not(cell, written):
    assert safe_cell(cell) == written


def test_the_writer_quotes_every_cell_of_every_row():
    out = io.StringIO()
    writer = csv_writer(out)

    writer.writerow(["=1+1", -5, "-5.00"])
    writer.writerows([["@me", "ok"], ["+x"]])

    assert list(csv.reader(io.StringIO(out.getvalue()))) == [
        ["'=1+1", "-5", "-5.00"],
        ["'@me", "ok"],
        ["'+x"],
    ]
