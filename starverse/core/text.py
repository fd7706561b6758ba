"""Text in the reader's language: messages that are stored and shown later, and operator data
kept in both languages (`localized`).

`later("Placed on %(node)s.") % {"node": name}` is a str (the English text, for logs and
APIs that want one) that also remembers its source and parameters, so it can be stored as
such and translated into the reader's language when shown (`translate_stored`)."""

from typing import Any

from django.db import models
from django.utils.translation import get_language, gettext


class Deferred(str):
    source: str
    params: dict[str, Any]

    def __new__(cls, source: str, params: dict[str, Any] | None = None) -> "Deferred":
        value = super().__new__(cls, source % params if params else source)
        value.source, value.params = source, dict(params or {})
        return value

    def __mod__(self, params: Any) -> "Deferred":
        return Deferred(self.source, params)


def later(source: str) -> Deferred:
    return Deferred(source)


def parts(message: str) -> tuple[str, dict[str, Any]]:
    """(source, params) of a message, for storing it."""
    if isinstance(message, Deferred):
        return message.source, {k: str(v) for k, v in message.params.items()}
    return str(message), {}


class StoredMessage(models.Model):
    """A row that keeps a message (a step of a timeline) as its source and parameters: made
    with `later(...) % {...}`, it is stored so (`message`, `params`) and read in the reader's
    language (`text`). Abstract: the instances' and the jobs' timelines have one each."""

    message = models.TextField(help_text="In its source language; see `text`.")
    params = models.JSONField(default=dict, blank=True)

    class Meta:
        abstract = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if isinstance(kwargs.get("message"), Deferred):
            kwargs["message"], kwargs["params"] = parts(kwargs["message"])
        super().__init__(*args, **kwargs)

    @property
    def text(self) -> str:
        """The message in the active language."""
        return translate_stored(self.message, self.params)


def translate_stored(source: str, params: dict[str, Any]) -> str:
    """The stored message in the active language; parameters that are themselves messages
    (a reason, say) are translated too, names and numbers pass through."""
    text = gettext(source)
    if not params:
        return text
    try:
        return text % {k: gettext(v) if isinstance(v, str) else v for k, v in params.items()}
    except (KeyError, TypeError, ValueError):
        return source % params


def chinese_column(label: str, *, max_length: int | None = None, help_text: str = "") -> Any:
    """The Simplified Chinese column an operator fills in beside the English `label` one, read
    through `localized`: blank (the English shows) unless filled in; a text column without
    `max_length`."""
    options: dict[str, Any] = {"blank": True, "default": "", "help_text": help_text}
    if max_length is None:
        return models.TextField(f"{label} (简体中文)", **options)
    return models.CharField(f"{label} (简体中文)", max_length=max_length, **options)


def localized(obj: Any, field: str) -> str:
    """Operator data in the active language: `<field>_zh_hans` for a Chinese reader when an
    operator filled it in, else `<field>` (English, the fallback)."""
    if (get_language() or "").lower().startswith("zh"):
        chinese = getattr(obj, f"{field}_zh_hans", "")
        if chinese:
            return str(chinese)
    return str(getattr(obj, field))
