import pytest

from starverse.core.money import MoneyParseError, format_fen, parse_fen


@pytest.mark.parametrize(
    ("fen", "text"),
    [
        (0, "¥0.00"),
        (1, "¥0.01"),
        (1000, "¥10.00"),
        (123456789, "¥1,234,567.89"),
        (-2550, "-¥25.50"),
    ],
)
def test_format_and_parse_round_trip(fen, text):
    assert format_fen(fen) == text
    assert parse_fen(text) == fen


@pytest.mark.parametrize(
    ("text", "fen"), [("100", 10000), (" ￥1,000.5 ", 100050), ("+3", 300), ("-0.07", -7)]
)
def test_parse_accepts_what_people_type(text, fen):
    assert parse_fen(text) == fen


@pytest.mark.parametrize("text", ["", "1.234", "1e3", "abc", "1,00.0.1", "¥"])
def test_parse_refuses_anything_else(text):
    with pytest.raises(MoneyParseError):
        parse_fen(text)


def test_format_refuses_floats():
    with pytest.raises(TypeError):
        format_fen(10.5)  # type: ignore[arg-type]
    assert format_fen(500, sign=True) == "+¥5.00"
