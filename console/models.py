"""The console app keeps no data of its own. Its one model has no table: it carries the
permission to read the operator overview (console.view_overview) and the admin entry that
leads to it (console.admin)."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class OperatorOverview(models.Model):
    """No rows: the admin's index lists it, and its permission opens the overview page."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [("view_overview", "Can view the operator overview")]
        verbose_name = _("operator overview")
        verbose_name_plural = _("operator overview")

    def __str__(self) -> str:
        return str(self._meta.verbose_name)
