from django.db import models


class Frobnicator(models.Model):
    """A model of the test only (never migrated): its names are not in the catalogue."""

    spin_rate = models.IntegerField("frobnication spin rate")

    class Meta:
        app_label = "untranslated"
        verbose_name = "frobnicator"

    def __str__(self) -> str:
        return str(self.spin_rate)
