"""The catalog in both languages: offering names, image names and descriptions and dataset
descriptions are answered in the reader's language (Accept-Language in the API, the console's
language on its pages), English where an operator left the Chinese blank."""

from django.core.management import call_command

from compute.models import Image, Offering
from datasets.models import PublicDataset

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-Hans"}


def _by_id(response):
    return {row["id"]: row for row in response.json()["results"]}


def test_accept_language_zh_hans_answers_the_chinese_catalog(api, db):
    call_command("seed_catalog", verbosity=0)
    call_command("seed_datasets", stdout=open("/dev/null", "w"))  # noqa: SIM115
    node = Offering.objects.get(slug="h100-80g-bare-metal")

    offerings = _by_id(api.get("/api/v1/offerings", **ZH))
    images = _by_id(api.get("/api/v1/images", **ZH))
    datasets = _by_id(api.get("/api/v1/datasets", **ZH))

    assert offerings[node.id]["name"] == "8× H100 80GB SXM 裸金属整机"
    assert images["tensorrt-llm-0.7"]["name"] == "TensorRT-LLM 0.7（推理）"
    assert images["deepspeed-0.12"]["description"].startswith("在 PyTorch 2.1 基础镜像上")
    assert datasets["coig"]["description"].startswith("中文开放通用指令集")
    english = _by_id(api.get("/api/v1/offerings", HTTP_ACCEPT_LANGUAGE="en"))
    assert english[node.id]["name"] == "8× H100 80GB SXM bare metal"


def test_a_blank_translation_falls_back_to_english(api, client, user, db):
    call_command("seed_catalog", verbosity=0)
    node = Offering.objects.get(slug="h100-80g-bare-metal")
    Offering.objects.filter(pk=node.pk).update(name_zh_hans="")
    Image.objects.filter(pk="pytorch-2.1").update(description_zh_hans="")
    PublicDataset.objects.create(
        id="plain",
        name="Plain",
        kind="dataset",
        size_bytes=1,
        licence="MIT",
        directory="plain",
        description="English only",
    )

    assert _by_id(api.get("/api/v1/offerings", **ZH))[node.id]["name"] == node.name
    image = _by_id(api.get("/api/v1/images", **ZH))["pytorch-2.1"]
    assert image["description"].startswith("Ubuntu 22.04, CUDA 12.1")
    assert _by_id(api.get("/api/v1/datasets", **ZH))["plain"]["description"] == "English only"
    client.force_login(user)
    page = client.get("/console/rent/", **ZH).content.decode()
    assert "8× H100 80GB SXM bare metal" in page and "2× H100 80GB SXM 云 GPU" in page


def test_the_data_migration_fills_the_seeded_rows_of_an_older_database(db):
    from importlib import import_module

    from django.apps import apps

    call_command("seed_catalog", verbosity=0)
    node = Offering.objects.get(slug="h100-80g-bare-metal")
    # a database seeded before the fields existed
    Offering.objects.update(slug=None, name_zh_hans="", trial_price_per_hour_fen=None)
    Image.objects.update(name_zh_hans="", description_zh_hans="")

    class Then:
        """The registry as the migration saw it: the catalog was the instances app's then."""

        def get_model(self, app: str, name: str) -> object:
            moved = app == "instances" and name in ("Offering", "Image")
            return apps.get_model("compute" if moved else app, name)

    import_module("instances.migrations.0020_seeded_catalog_trial_and_chinese").seed(Then(), None)

    node.refresh_from_db()
    assert (node.slug, node.trial_price_per_hour_fen) == ("h100-80g-bare-metal", 1000)
    assert node.name_zh_hans == "8× H100 80GB SXM 裸金属整机"
    assert Offering.objects.get(name="1× A100 80GB SXM").trial_price_per_hour_fen == 83
    assert Image.objects.get(pk="pytorch-2.1").description_zh_hans.startswith("Ubuntu 22.04，")


def test_the_serve_form_and_an_unnamed_order_speak_the_readers_language(client, client_for, user):
    from instances.models import Instance
    from tests.factories import fund

    call_command("seed_catalog", verbosity=0)
    client.force_login(user)
    chinese = client.get("/console/endpoints/new/", **ZH).content.decode()
    english = client.get("/console/endpoints/new/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "1× H100 80GB SXM 云 GPU" in chinese
    assert "1× H100 80GB SXM —" in english and "云 GPU" not in english

    fund(user, 100_000)
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    order = {"offering": offering.id, "image": "pytorch-2.1"}
    answer = client_for(user).post("/api/v1/instances", order, format="json", **ZH)
    assert answer.status_code == 202, answer.json()
    assert Instance.objects.get(pk=answer.json()["id"]).name == "1× H100 80GB SXM 云 GPU"
