"""The console's endpoint pages: the list, "Serve this" from a public model, an endpoint's
page with its URL, engine command and cost, a key shown once, scaling, and another tenant's
pages being 404."""

import pytest
from django.test import Client

from compute.models import Offering
from endpoints.models import Endpoint, EndpointKey
from tests.factories import (
    _seed_catalog,
    fund,
    make_disk,
    make_endpoint,
    make_public_model,
    make_user,
)


@pytest.fixture
def owner(db):
    _seed_catalog()
    user = make_user()
    fund(user, 100_000)
    return user


def _signed_in(user):
    client = Client()
    client.force_login(user)
    return client


def test_serve_this_from_a_public_model_makes_the_endpoint_and_shows_its_page(owner):
    model = make_public_model()
    client = _signed_in(owner)
    form = client.get(f"/console/endpoints/new/?dataset={model.pk}")
    assert form.status_code == 200
    assert f'name="source" value="dataset:{model.pk}" checked' in form.content.decode()
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    answer = client.post(
        "/console/endpoints/new/",
        {
            "name": "qwen",
            "source": f"dataset:{model.pk}",
            "engine": "vllm",
            "offering": offering.id,
            "min_replicas": "0",
            "max_replicas": "2",
            "opt_vllm_max_model_len": "4096",
            "opt_tensorrt-llm_max_seq_len": "",
        },
    )
    endpoint = Endpoint.objects.get()
    assert answer.status_code == 302
    assert answer["Location"] == f"/console/endpoints/{endpoint.id}/"
    assert endpoint.engine_options == {"max_model_len": 4096, "tensor_parallel_size": 1}
    assert (endpoint.min_replicas, endpoint.max_replicas) == (0, 2)
    page = client.get(answer["Location"]).content.decode()
    assert f"ep-{endpoint.id[3:].lower()}.localhost:8002/v1" in page
    assert "--max-model-len 4096" in page
    assert "¥0.00" in page
    listing = client.get("/console/endpoints/").content.decode()
    assert endpoint.name in listing


def test_a_refused_form_says_which_field_and_makes_nothing(owner):
    make_public_model()
    client = _signed_in(owner)
    answer = client.post(
        "/console/endpoints/new/",
        {
            "name": "qwen",
            "source_kind": "dataset",
            "dataset": "/public/models/absent",
            "engine": "vllm",
            "offering": Offering.objects.get(name="1× H100 80GB SXM").id,
            "min_replicas": "1",
            "max_replicas": "1",
        },
    )
    assert answer.status_code == 200
    assert "source.dataset" in answer.content.decode()
    assert not Endpoint.objects.exists()


def test_a_new_key_is_shown_once_then_revoked(owner):
    endpoint = make_endpoint(owner)
    client = _signed_in(owner)
    client.post(f"/console/endpoints/{endpoint.id}/keys/", {"name": "laptop"})
    key = EndpointKey.objects.get()
    first = client.get(f"/console/endpoints/{endpoint.id}/").content.decode()
    assert "sk-sv-" in first
    second = client.get(f"/console/endpoints/{endpoint.id}/").content.decode()
    assert "sk-sv-" not in second.replace(key.prefix, "")
    client.post(f"/console/endpoints/{endpoint.id}/keys/{key.id}/revoke/")
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_manual_scale_changes_the_bounds_at_once(owner):
    endpoint = make_endpoint(owner)
    _signed_in(owner).post(
        f"/console/endpoints/{endpoint.id}/scale/", {"min_replicas": "2", "max_replicas": "3"}
    )
    endpoint.refresh_from_db()
    assert (endpoint.min_replicas, endpoint.max_replicas) == (2, 3)


def test_another_tenants_endpoint_pages_are_404(owner):
    endpoint = make_endpoint(owner)
    EndpointKey.objects.create(
        endpoint=endpoint, name="k", prefix="sk-sv-x", key_hash="0" * 64, created_by=owner
    )
    stranger = _signed_in(make_user())
    assert stranger.get(f"/console/endpoints/{endpoint.id}/").status_code == 404
    for path in ("scale/", "delete/", "keys/", f"keys/{EndpointKey.objects.get().id}/revoke/"):
        assert stranger.post(f"/console/endpoints/{endpoint.id}/{path}").status_code == 404
    endpoint.refresh_from_db()
    assert endpoint.status == "provisioning"
    assert EndpointKey.objects.filter(revoked_at__isnull=True).count() == 1
    assert endpoint.name not in stranger.get("/console/endpoints/").content.decode()


def test_serve_this_is_offered_on_public_models_not_on_datasets(owner):
    from datasets.models import PublicDataset

    model = make_public_model()
    PublicDataset.objects.create(
        id="c4-en", name="C4", kind="dataset", directory="c4-en", size_bytes=1, licence="ODC-By"
    )
    page = _signed_in(owner).get("/console/datasets/").content.decode()
    assert f'href="/console/endpoints/new/?dataset={model.pk}"' in page
    assert "c4-en" in page
    assert "?dataset=c4-en" not in page


def test_serve_this_on_a_disk_opens_the_form_with_it_and_serves_the_folder(catalog):
    from storage.provisioning import disk_ensure

    owner = make_user()
    fund(owner, 100_000)
    disk = make_disk(owner)
    disk_ensure(disk.id)
    client = _signed_in(owner)
    disks = client.get("/console/disks/").content.decode()
    button = disks.index(f'<input type="hidden" name="disk" value="{disk.id}">')
    assert 'action="/console/endpoints/new/"' in disks[button - 200 : button]
    assert "Serve this" in disks[button : button + 200]

    form = client.get(f"/console/endpoints/new/?disk={disk.id}").content.decode()
    assert f'name="source" value="disk:{disk.id}" checked' in form
    answer = client.post(
        "/console/endpoints/new/",
        {
            "name": "sft",
            "source": f"disk:{disk.id}",
            "path": "checkpoints/final",
            "engine": "vllm",
            "offering": Offering.objects.get(name="1× H100 80GB SXM").id,
            "min_replicas": "1",
            "max_replicas": "1",
        },
    )
    endpoint = Endpoint.objects.get()
    assert answer.status_code == 302, answer.content.decode()[:500]
    assert (endpoint.source_kind, endpoint.source_disk_id, endpoint.source_path) == (
        "disk",
        disk.id,
        "checkpoints/final",
    )
    assert endpoint.source_claim == disk.k8s_name
