from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from datasets.choices import MOUNT_ROOTS, DatasetKind
from starverse.core.text import chinese_column

# One path segment, never hidden or a parent ("." / ".."): it is pasted into users' shells.
DIRECTORY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class PublicDataset(models.Model):
    """One entry of the public pool: a dataset or a model that operators keep on shared storage,
    mounted read-only in every instance at /public/data/<directory> or
    /public/models/<directory>. Users only read the catalog; operators edit it in the admin."""

    id = models.SlugField(primary_key=True, max_length=64, help_text="e.g. llama-3-8b-instruct")
    name = models.CharField(max_length=100, help_text="In English; shown where no translation is.")
    name_zh_hans = chinese_column("name", max_length=100, help_text="Blank: the English name.")
    kind = models.CharField(max_length=16, choices=DatasetKind.choices)
    version = models.CharField(max_length=64, blank=True)
    size_bytes = models.BigIntegerField(
        validators=[MinValueValidator(0)], help_text="Size on the pool, in bytes."
    )
    licence = models.CharField(max_length=100, help_text="e.g. Apache-2.0, CC BY-NC 4.0.")
    licence_zh_hans = chinese_column(
        "licence", max_length=100, help_text="Blank: the English licence name (as for Apache-2.0)."
    )
    description = models.TextField(blank=True)
    description_zh_hans = chinese_column("description", help_text="Blank: the English text.")
    directory = models.CharField(
        max_length=128,
        validators=[
            RegexValidator(
                r"\A[A-Za-z0-9][A-Za-z0-9._-]*\Z",
                "A single folder name: letters, digits, '.', '_' and '-', not starting with "
                "'.', '_' or '-'.",
            )
        ],
        help_text="Folder under /public/data (datasets) or /public/models (models).",
    )
    homepage = models.URLField(blank=True)
    tags = models.CharField(
        max_length=300,
        blank=True,
        help_text="Comma-separated search words, e.g. chinese, llm, instruction-tuning.",
    )
    active = models.BooleanField(default=True, help_text="Inactive entries are hidden.")
    sort = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["sort", "name"]
        verbose_name = "public dataset or model"
        verbose_name_plural = "public datasets and models"
        constraints = [
            models.CheckConstraint(
                condition=Q(size_bytes__gte=0), name="publicdataset_size_bytes_gte_0"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=DatasetKind.values), name="publicdataset_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(directory__regex=DIRECTORY_PATTERN),
                name="publicdataset_directory_valid",
            ),
            models.UniqueConstraint(
                fields=["kind", "directory"],
                name="publicdataset_unique_directory",
                violation_error_message="Another entry of this kind already uses this folder.",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        self.tags = ", ".join(self.tag_list)

    @property
    def path(self) -> str:
        """Where the entry is mounted, read-only, in every instance."""
        return f"{MOUNT_ROOTS[self.kind]}/{self.directory}"

    @property
    def copy_command(self) -> str:
        # `directory` is one validated path segment, so the command needs no quoting.
        return f"cp -r {self.path} ./"

    @property
    def tag_list(self) -> list[str]:
        tags = (tag.strip() for tag in self.tags.split(","))
        return list(dict.fromkeys(tag for tag in tags if tag))

    @property
    def homepage_or_none(self) -> str | None:
        return self.homepage or None
