"""The Jinja2 environment of the console: url(), static(), i18n, money formatting
and line breaks in long names (wbr)."""

import functools
import re
from typing import Any

from django.contrib.messages import get_messages
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.templatetags.static import static
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils import timezone, translation
from jinja2 import Environment
from markupsafe import Markup, escape

from starverse.core.links import public_url
from starverse.core.money import format_fen
from starverse.core.text import localized


def _url(name: str, *args: Any, **kwargs: Any) -> str:
    if args or kwargs:
        return reverse(name, args=args or None, kwargs=kwargs or None)
    return _plain_url(name, get_script_prefix(), get_urlconf())


@functools.lru_cache(maxsize=512)
def _plain_url(name: str, prefix: str, urlconf: Any) -> str:
    """A route without arguments, reversed once per process (a console page names some thirty:
    the navigation alone is seventeen). The script prefix and the thread's URLconf are part
    of the key, as reverse() reads them."""
    return reverse(name)


@receiver(setting_changed)
def _urls_changed(*, setting: str, **_: Any) -> None:
    if setting == "ROOT_URLCONF":  # a test's own URLconf
        _plain_url.cache_clear()


def _localtime(value: Any, fmt: str = "%Y-%m-%d %H:%M") -> str:
    if value is None:
        return "—"
    return timezone.localtime(value).strftime(fmt)


def _wbr(value: Any) -> Markup:
    """The text, escaped, with a line-break opportunity after each dot and slash: a host name or
    a path wraps between its parts, never inside one, and copies whole (<wbr> adds nothing)."""
    return Markup("<wbr>").join(escape(part) for part in re.split(r"(?<=[./])", str(value)))


def environment(**options: Any) -> Environment:
    options.setdefault("autoescape", True)
    env = Environment(extensions=["jinja2.ext.i18n"], **options)  # noqa: S701
    env.install_gettext_translations(translation, newstyle=True)  # type: ignore[attr-defined]
    env.globals.update(
        url=_url,
        static=static,
        get_messages=get_messages,
        get_language=translation.get_language,
        localized=localized,
        public_url=public_url,
    )
    env.filters.update(money=format_fen, localtime=_localtime, wbr=_wbr)
    return env
