"""Kubernetes resource quantities ("500m", "2Gi", "8") for the API emulator's scheduler."""

from __future__ import annotations

import functools
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)


class QuantityError(ValueError):
    pass


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity to an exact number of base units (cores, bytes, devices)."""
    if isinstance(value, bool):
        raise QuantityError(f"quantities must match the regular expression: {value!r}")
    if isinstance(value, int | float):
        return Fraction(Decimal(str(value)))
    return _parse_text(str(value))


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    """A quantity written as text (a Fraction is immutable: the kubelets, the scheduler and
    the volume resizer, which read the same few quantities on every pass, share one)."""
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    try:
        number = Fraction(Decimal(match.group("num")))
    except InvalidOperation as exc:  # pragma: no cover - the regex rules this out
        raise QuantityError(str(exc)) from exc
    suffix = match.group("suffix") or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * Fraction(10) ** int(suffix[1:])


def is_quantity(value: object) -> bool:
    try:
        parse_quantity(value)  # type: ignore[arg-type]
    except (QuantityError, TypeError):
        return False
    return True


def format_quantity(value: Fraction, resource: str) -> str:
    """Render a quantity compactly for messages (cpu in cores or millicores, bytes in Ki/Mi/Gi)."""
    if resource == "cpu":
        if value.denominator == 1:
            return str(value.numerator)
        return f"{int(value * 1000)}m"
    if resource in ("memory", "ephemeral-storage", "storage"):
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = _BINARY[suffix]
            if value >= unit and value % unit == 0:
                return f"{int(value // unit)}{suffix}"
    if value.denominator == 1:
        return str(value.numerator)
    return str(float(value))
