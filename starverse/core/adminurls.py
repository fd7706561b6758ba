"""Links to the operators' admin pages of an object.

Our ids have an underscore after their prefix (`txn_2Fq…`), and the admin reads an underscore
followed by the hex code of a character it escapes (`_2F` "/", `_3A` ":", `_5F` "_" …) in a
URL's object id as that character (its `quote`, which its own links apply): a link made with the
raw id of about one object in two hundred leads to an object that does not exist. Every link we
make to a change page quotes the id as the admin does."""

from typing import Any

from django.contrib.admin.utils import quote
from django.urls import reverse


def admin_change_url(model: str, pk: Any) -> str:
    """The change page of object `pk` of `model` (`app_label_modelname`, e.g. `billing_topup`)."""
    return reverse(f"admin:{model}_change", args=[quote(pk)])
