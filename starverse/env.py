"""The one place settings read the environment.

Every outside value goes through these helpers so that a missing or malformed required value
stops the process at start-up with ImproperlyConfigured, instead of failing on first use.
"""

import os
from typing import TypeVar

from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")
_MISSING = object()
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str, default: object) -> str | object:
    value = os.environ.get(name)
    if value is None:
        if default is _MISSING:
            raise ImproperlyConfigured(f"Set the environment variable {name}.")
        return default
    return value


def env_str(name: str, default: str | object = _MISSING) -> str:
    return str(_raw(name, default))


def env_optional(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def env_int(name: str, default: int | object = _MISSING) -> int:
    value = _raw(name, default)
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}.") from None


def env_bool(name: str, default: bool | object = _MISSING) -> bool:
    value = _raw(name, default)
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {value!r}.")


def env_list(name: str, default: list[str] | object = _MISSING) -> list[str]:
    value = _raw(name, default)
    if isinstance(value, list):
        return value
    return [item.strip() for item in str(value).split(",") if item.strip()]
