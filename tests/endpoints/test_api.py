"""The endpoints API without the cluster: what a create is checked against (each refusal a 400
naming the field, nothing made), idempotency, keys shown once and stored hashed, scaling,
deletion, and another tenant's endpoint being a 404."""

import hashlib

import pytest

from compute.models import Offering, TenantLimits
from endpoints.models import Endpoint, EndpointKey
from tests.factories import fund, make_disk, make_endpoint, make_public_model, make_user


@pytest.fixture
def owner(db):
    user = make_user()
    make_public_model()
    from tests.factories import _seed_catalog

    _seed_catalog()
    fund(user, 100_000)
    return user


def _body(**changes):
    body = {
        "name": "qwen",
        "source": {"dataset": "qwen2-7b-instruct"},
        "engine": "vllm",
        "offering": Offering.objects.get(name="1× H100 80GB SXM").id,
        "min_replicas": 1,
        "max_replicas": 2,
    }
    body.update(changes)
    return body


def test_create_answers_202_with_the_url_the_command_and_no_replicas_yet(owner, client_for):
    answer = client_for(owner).post(
        "/api/v1/endpoints",
        _body(engine_options={"max_model_len": 8192, "dtype": "bfloat16"}),
        format="json",
    )
    assert answer.status_code == 202, answer.content
    body = answer.json()
    endpoint = Endpoint.objects.get(pk=body["id"])
    assert body["status"] == "provisioning"
    assert body["url"] == f"http://ep-{endpoint.id[3:].lower()}.localhost:8002/v1"
    assert body["replicas"] == {"ready": 0, "desired": 1, "min": 1, "max": 2, "restarts": 0}
    assert body["cost_fen"] == 0
    assert body["engine_options"] == {
        "max_model_len": 8192,
        "dtype": "bfloat16",
        "tensor_parallel_size": 1,
    }
    assert body["engine_command"] == (
        "vllm serve /model --host 0.0.0.0 --port 8000 --served-model-name qwen "
        "--max-model-len 8192 --dtype bfloat16 --tensor-parallel-size 1"
    )
    assert body["source"] == {"dataset": "qwen2-7b-instruct"}


@pytest.mark.parametrize(
    ("changes", "field", "code"),
    [
        (
            {"engine_options": {"max_num_seqs": 8}},
            "engine_options.max_num_seqs",
            "unknown_engine_option",
        ),
        (
            {"engine_options": {"quantization": "int4_awq"}},
            "engine_options.quantization",
            "invalid_engine_option",
        ),
        (
            {"engine": "tensorrt-llm", "engine_options": {"tp_size": 2}},
            "engine_options.tp_size",
            "invalid_engine_option",
        ),
        ({"source": {"dataset": "/public/models/nope"}}, "source.dataset", "not_a_model"),
        ({"source": {"disk": "dsk_unknown", "path": "ckpt"}}, "source.disk", "disk_not_found"),
        ({"source": {"nas_path": "models/x"}}, "source.nas_path", "no_nas"),
        ({"source": {}}, "source", "invalid_source"),
        ({"min_replicas": 3, "max_replicas": 2}, "max_replicas", "invalid"),
        ({"max_replicas": 33}, "max_replicas", "invalid"),
        ({"offering": "off_nope"}, "offering", "unknown_offering"),
        ({"name": "a b"}, "name", "invalid"),
    ],
)
def test_a_refused_create_is_a_400_naming_the_field_and_makes_nothing(
    owner, client_for, changes, field, code
):
    answer = client_for(owner).post("/api/v1/endpoints", _body(**changes), format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == code
    assert list(answer.json()["errors"]) == [field]
    assert not Endpoint.objects.exists()


def test_a_disk_path_outside_the_disk_is_refused_naming_source_path(owner, client_for):
    disk = make_disk(owner)
    type(disk).objects.filter(pk=disk.pk).update(status="available", k8s_name="cd-x")
    answer = client_for(owner).post(
        "/api/v1/endpoints", _body(source={"disk": disk.pk, "path": "../etc"}), format="json"
    )
    assert answer.status_code == 400
    assert list(answer.json()["errors"]) == ["source.path"]
    another = client_for(make_user()).post(
        "/api/v1/endpoints", _body(source={"disk": disk.pk, "path": "ckpt"}), format="json"
    )
    assert another.status_code == 400
    assert list(another.json()["errors"]) == ["source.disk"]
    assert not Endpoint.objects.exists()


def test_the_gpu_limit_counts_instances_and_every_replica_an_endpoint_may_scale_to(
    owner, client_for
):
    TenantLimits.objects.create(tenant=owner.tenant, max_running_gpus=3)
    client = client_for(owner)
    assert client.post("/api/v1/endpoints", _body(max_replicas=2), format="json").status_code == 202
    refused = client.post("/api/v1/endpoints", _body(name="b", max_replicas=2), format="json")
    assert refused.status_code == 400
    assert refused.json()["errors"] == {"max_replicas": [refused.json()["detail"]]}
    assert (
        client.post("/api/v1/endpoints", _body(name="c", max_replicas=1), format="json").status_code
        == 202
    )


def test_the_same_idempotency_key_answers_the_same_endpoint(owner, client_for):
    client = client_for(owner)
    first = client.post("/api/v1/endpoints", _body(), format="json", HTTP_IDEMPOTENCY_KEY="k1")
    again = client.post("/api/v1/endpoints", _body(), format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert first.json()["id"] == again.json()["id"]
    other = client.post(
        "/api/v1/endpoints", _body(name="other"), format="json", HTTP_IDEMPOTENCY_KEY="k1"
    )
    assert other.status_code == 409
    assert other.json()["code"] == "idempotency_conflict"
    assert Endpoint.objects.count() == 1


def test_without_an_hour_on_the_balance_it_is_a_402(db, client_for):
    user = make_user()
    make_public_model()
    from tests.factories import _seed_catalog

    _seed_catalog()
    answer = client_for(user).post("/api/v1/endpoints", _body(min_replicas=2), format="json")
    assert answer.status_code == 402
    assert not Endpoint.objects.exists()


def test_keys_are_shown_once_stored_hashed_listed_and_revoked(owner, client_for):
    endpoint = make_endpoint(owner)
    client = client_for(owner)
    made = client.post(f"/api/v1/endpoints/{endpoint.id}/keys", {"name": "prod"}, format="json")
    assert made.status_code == 201
    secret = made.json()["key"]
    assert secret.startswith("sk-sv-")
    row = EndpointKey.objects.get(pk=made.json()["id"])
    assert row.key_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(EndpointKey.objects.values().get(pk=row.pk))
    listed = client.get(f"/api/v1/endpoints/{endpoint.id}/keys").json()["results"]
    assert [(k["id"], k["name"], k["prefix"]) for k in listed] == [(row.id, "prod", secret[:12])]
    assert "key" not in listed[0]
    gone = client.delete(f"/api/v1/endpoints/{endpoint.id}/keys/{row.id}")
    assert gone.status_code == 204
    assert client.get(f"/api/v1/endpoints/{endpoint.id}/keys").json()["results"] == []
    again = client.delete(f"/api/v1/endpoints/{endpoint.id}/keys/{row.id}")
    assert again.status_code == 404


def test_another_tenants_endpoint_and_keys_are_404(owner, client_for):
    endpoint = make_endpoint(owner)
    key = client_for(owner).post(f"/api/v1/endpoints/{endpoint.id}/keys", {}, format="json")
    stranger = client_for(make_user())
    for method, path in [
        ("get", f"/api/v1/endpoints/{endpoint.id}"),
        ("patch", f"/api/v1/endpoints/{endpoint.id}"),
        ("delete", f"/api/v1/endpoints/{endpoint.id}"),
        ("get", f"/api/v1/endpoints/{endpoint.id}/keys"),
        ("post", f"/api/v1/endpoints/{endpoint.id}/keys"),
        ("delete", f"/api/v1/endpoints/{endpoint.id}/keys/{key.json()['id']}"),
        ("get", f"/api/v1/endpoints/{endpoint.id}/metrics"),
    ]:
        answer = getattr(stranger, method)(path, {}, format="json")
        assert answer.status_code == 404, (method, path)
    assert stranger.get("/api/v1/endpoints").json()["results"] == []
    assert EndpointKey.objects.filter(revoked_at__isnull=True).count() == 1
    assert Endpoint.objects.get(pk=endpoint.pk).status == "provisioning"


def test_patch_scales_at_once_and_update_starts_a_new_generation(owner, client_for):
    endpoint = make_endpoint(owner)
    client = client_for(owner)
    scaled = client.patch(
        f"/api/v1/endpoints/{endpoint.id}", {"min_replicas": 0, "max_replicas": 3}, format="json"
    )
    assert scaled.status_code == 202
    assert scaled.json()["replicas"]["min"] == 0
    assert scaled.json()["replicas"]["max"] == 3
    refused = client.patch(
        f"/api/v1/endpoints/{endpoint.id}", {"engine_options": {"nope": 1}}, format="json"
    )
    assert refused.status_code == 400
    assert list(refused.json()["errors"]) == ["engine_options.nope"]
    updated = client.patch(
        f"/api/v1/endpoints/{endpoint.id}", {"engine_options": {"dtype": "float16"}}, format="json"
    )
    assert updated.json()["status"] == "updating"
    assert "--dtype float16" in updated.json()["engine_command"]


def test_delete_answers_202_deleting_and_revokes_its_keys(owner, client_for):
    endpoint = make_endpoint(owner)
    client = client_for(owner)
    client.post(f"/api/v1/endpoints/{endpoint.id}/keys", {}, format="json")
    answer = client.delete(f"/api/v1/endpoints/{endpoint.id}")
    assert answer.status_code == 202
    assert answer.json()["status"] == "deleting"
    assert not EndpointKey.objects.filter(revoked_at__isnull=True).exists()
    assert (
        client.patch(
            f"/api/v1/endpoints/{endpoint.id}", {"max_replicas": 1}, format="json"
        ).status_code
        == 409
    )
