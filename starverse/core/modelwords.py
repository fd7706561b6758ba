"""The words the admin reads from the models: an app's name, a model's names (singular and
plural) and each field's name, shown as the admin's headings, columns, filters and buttons
("Add node"). They are written in the code as plain English (so they stay out of migrations);
`translate` makes each a lazy translation when the apps are ready, and `words` lists them for
the catalogue (bin/messages extracts them, and `bin/messages --check` fails while one lacks its
translation).

The admin's own column labels (`@admin.display(description=...)`) and actions are marked with
`_()` where they are written; `unmarked_labels` names any that are not."""

from collections.abc import Iterator

from django.apps import AppConfig, apps
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.utils import label_for_field
from django.db import models
from django.db.models.options import Options
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy


def project_apps() -> list[AppConfig]:
    """The project's own apps (Django's and third parties' bring their own catalogues)."""
    return [app for app in apps.get_app_configs() if _ours(app)]


def _ours(app: AppConfig) -> bool:
    return app.path.startswith(str(settings.BASE_DIR)) and "site-packages" not in app.path


def _fields(model: type[models.Model]) -> Iterator[models.Field]:  # type: ignore[type-arg]
    for field in model._meta.get_fields(include_parents=False):
        if isinstance(field, models.Field) and not field.auto_created:
            yield field


def _names(app: AppConfig) -> Iterator[tuple[object, str]]:
    """(holder, attribute) of each name of an app: its own, its models', their fields'."""
    yield app, "verbose_name"
    for model in app.get_models():
        yield model._meta, "verbose_name_plural"  # first: a derived one is read from the name
        yield model._meta, "verbose_name"
        for field in _fields(model):
            yield field, "verbose_name"


def _plain(holder: object, attribute: str) -> str:
    text = getattr(holder, attribute)
    if isinstance(text, str):
        return text
    if (
        isinstance(holder, Options)
        and attribute == "verbose_name_plural"
        and "verbose_name_plural" not in holder.original_attrs
        and isinstance(holder.verbose_name, str)
    ):
        return f"{holder.verbose_name}s"  # Django's own plural, made lazily from the name
    return ""


# The names `translate` made lazy, as written.
_translated: list[str] = []


def words() -> list[str]:
    """Every app, model and field name of the project's apps written as a plain string, in the
    order the apps and models are declared."""
    plain = [_plain(h, a) for app in project_apps() for h, a in _names(app)]
    return [word for word in dict.fromkeys(_translated + plain) if word]


def translate() -> None:
    """Make every plain name `words` lists a lazy translation (only the attribute the admin and
    forms read: a field's declared `verbose_name` argument, which its migrations hold, is left
    alone)."""
    for app in project_apps():
        for holder, attribute in _names(app):
            text = _plain(holder, attribute)
            if text:
                _translated.append(text)
                setattr(holder, attribute, gettext_lazy(text))


def unmarked_labels(site: admin.AdminSite | None = None) -> list[str]:
    """`Model admin: column` for each changelist column and action of the project's admin whose
    label is a plain string: a column of a method without a `_()` description, or an action
    likewise (a field's column is the field's name, which `translate` covers)."""
    site = site or admin.site
    found: list[str] = []
    for model, model_admin in site._registry.items():
        if not _ours(apps.get_app_config(model._meta.app_label)):
            continue
        where = type(model_admin).__name__
        for name in model_admin.list_display:
            if not isinstance(name, str) or name == "__str__":
                continue
            if any(field.name == name for field in model._meta.get_fields()):
                continue  # a field's column: its name, which `translate` covers
            column = label_for_field(name, model, model_admin)
            if not isinstance(column, Promise):
                found.append(f"{where}: {name} ({column})")
        for action in model_admin.actions or ():
            function: object = getattr(model_admin, action) if isinstance(action, str) else action
            label = getattr(function, "short_description", None)
            if label is not None and not isinstance(label, Promise):
                found.append(f"{where}: action {getattr(function, '__name__', action)} ({label})")
    return found
