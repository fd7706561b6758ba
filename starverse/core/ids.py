"""Opaque public ids: a short type prefix and 20 random base62 characters (≈119 bits).

They are the primary keys of tenant-visible rows, so an id reveals neither order nor count."""

import secrets
import string
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.db import models

ALPHABET = string.ascii_letters + string.digits
ID_LENGTH = 20


def random_base62(length: int) -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def new_id(prefix: str) -> str:
    return f"{prefix}_{random_base62(ID_LENGTH)}"


def new_ids(prefix: str, count: int) -> list[str]:
    """`count` ids like new_id's, for a batch (the metering tick makes 100,000 at once): one
    call for random bytes per id instead of one per character. Bytes of 248 and up are
    dropped, so that each character stays uniform over the 62 (248 = 4 × 62)."""
    ids: list[str] = []
    while len(ids) < count:
        chars = [ALPHABET[b % 62] for b in secrets.token_bytes(ID_LENGTH + 8) if b < 248]
        if len(chars) >= ID_LENGTH:
            ids.append(f"{prefix}_{''.join(chars[:ID_LENGTH])}")
    return ids


def id_factory(prefix: str) -> Callable[[], str]:
    def make() -> str:
        return new_id(prefix)

    make.__name__ = f"new_{prefix}_id"
    make.__qualname__ = make.__name__
    return make


# Generic in its stored and read types like every django-stubs field, so that the plugin types
# a foreign key to these rows as str, or str | None where it is nullable. Django's fields take
# no type arguments at run time; there a Generic mixin stands in.
_ST = TypeVar("_ST", contravariant=True)
_GT = TypeVar("_GT", covariant=True)
if TYPE_CHECKING:
    _CharColumn = models.CharField
else:

    class _CharColumn(models.CharField, Generic[_ST, _GT]):
        pass


class PublicIdField(_CharColumn[_ST, _GT]):
    """Primary key holding a prefixed random id; the prefix names the resource type."""

    def __init__(self, prefix: str = "", **kwargs: Any) -> None:
        self.prefix = prefix
        kwargs.setdefault("max_length", 32)
        kwargs.setdefault("primary_key", True)
        kwargs.setdefault("editable", False)
        if prefix:
            kwargs.setdefault("default", _factories.setdefault(prefix, id_factory(prefix)))
        super().__init__(**kwargs)

    def deconstruct(self) -> tuple[str, str, Sequence[Any], dict[str, Any]]:
        name, path, args, kwargs = super().deconstruct()
        kwargs["prefix"] = self.prefix
        kwargs.pop("default", None)
        return name, path, args, kwargs


_factories: dict[str, Callable[[], str]] = {}
