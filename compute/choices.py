from django.db import models
from django.utils.translation import gettext_lazy as _


class OfferingKind(models.TextChoices):
    BARE_METAL = "bare_metal", _("Bare metal (whole node)")
    CLOUD = "cloud", _("Cloud GPU")


class BillingMode(models.TextChoices):
    HOURLY = "hourly", _("Pay as you go (per minute)")
    MONTHLY = "monthly", _("Monthly")
