import pytest
from django.db import IntegrityError, transaction

from datasets.models import PublicDataset
from starverse.core.errors import InvalidInput
from tests.datasets.conftest import make_entry


@pytest.mark.parametrize(
    ("kind", "path"),
    [("dataset", "/public/data/CLUECorpusSmall"), ("model", "/public/models/CLUECorpusSmall")],
)
def test_path_follows_the_kind(db, kind, path):
    entry = make_entry("entry", kind=kind, directory="CLUECorpusSmall")

    assert entry.path == path
    assert entry.copy_command == f"cp -r {path} ./"
    assert PublicDataset.objects.get(pk="entry").path == path  # computed, not stored


@pytest.mark.parametrize("directory", ["../etc", ".hidden", "a/b", "-rf", "two words", ""])
def test_a_directory_must_be_one_plain_folder_name(db, directory):
    with pytest.raises(InvalidInput):
        make_entry("bad", directory=directory)

    assert not PublicDataset.objects.exists()


def test_the_database_refuses_negative_sizes_and_bad_directories(db):
    fields = {"name": "x", "kind": "dataset", "licence": "MIT"}
    with pytest.raises(IntegrityError), transaction.atomic():
        PublicDataset.objects.create(id="neg", size_bytes=-1, directory="x", **fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        PublicDataset.objects.create(id="dots", size_bytes=1, directory="../x", **fields)

    assert not PublicDataset.objects.exists()


def test_a_directory_is_unique_per_kind(db):
    make_entry("one", kind="dataset", directory="shared-name")
    make_entry("two", kind="model", directory="shared-name")  # another mount root: fine

    with pytest.raises(IntegrityError), transaction.atomic():
        make_entry("three", kind="dataset", directory="shared-name")

    assert sorted(PublicDataset.objects.values_list("pk", flat=True)) == ["one", "two"]


def test_tags_are_normalised(db):
    entry = make_entry("tagged", tags=" llm,chat ,, llm, 中文 ")

    assert entry.tags == "llm, chat, 中文"
    assert entry.tag_list == ["llm", "chat", "中文"]
