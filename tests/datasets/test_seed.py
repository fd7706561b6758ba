from django.core.management import call_command

from datasets.management.commands.seed_datasets import CATALOG
from datasets.models import PublicDataset


def test_seed_is_idempotent_and_realistic(db):
    call_command("seed_datasets", stdout=None)
    first = {row["id"]: row for row in PublicDataset.objects.values()}
    call_command("seed_datasets")
    second = {row["id"]: row for row in PublicDataset.objects.values()}

    assert 10 <= len(first) <= 16
    assert len(first) == len(CATALOG)
    assert first.keys() == second.keys()
    for key, row in first.items():
        assert {k: v for k, v in row.items() if k != "updated_at"} == {
            k: v for k, v in second[key].items() if k != "updated_at"
        }
    kinds = {row["kind"] for row in first.values()}
    assert kinds == {"dataset", "model"}
    assert {"llama-3-8b-instruct", "baichuan2-7b-chat", "imagenet-1k"} <= first.keys()


def test_seeded_entries_are_valid_and_mounted_under_their_kind(db):
    call_command("seed_datasets")

    for entry in PublicDataset.objects.all():
        entry.full_clean()
        root = "/public/models/" if entry.kind == "model" else "/public/data/"
        assert entry.path == root + entry.directory
        assert entry.size_bytes > 0 and entry.licence and entry.description
    llama = PublicDataset.objects.get(pk="llama-3-8b-instruct")
    assert llama.path == "/public/models/Meta-Llama-3-8B-Instruct"
    assert llama.licence == "Llama 3 Community License"


def test_reseeding_restores_data_but_keeps_operator_decisions(db):
    call_command("seed_datasets")
    PublicDataset.objects.filter(pk="coig").update(active=False, sort=999, size_bytes=1)

    call_command("seed_datasets")

    coig = PublicDataset.objects.get(pk="coig")
    assert (coig.active, coig.sort) == (False, 999)
    assert coig.size_bytes == 258_476_032


def test_seeded_catalog_keeps_its_order(api, db):
    call_command("seed_datasets")

    listed = [row["id"] for row in api.get("/api/v1/datasets?page_size=100").json()["results"]]

    assert listed == [row[0] for row in CATALOG]
