from django.db import models
from django.utils.translation import gettext_lazy as _


class DatasetKind(models.TextChoices):
    DATASET = "dataset", _("Dataset")
    MODEL = "model", _("Model")


# Where each kind is mounted, read-only, in every instance (the pool itself is mounted at /public).
MOUNT_ROOTS: dict[str, str] = {
    DatasetKind.DATASET: "/public/data",
    DatasetKind.MODEL: "/public/models",
}
