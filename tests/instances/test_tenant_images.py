"""A tenant's own images: brought by an OCI reference from an allowed registry, with registry
credentials kept only as the tenant namespace's pull Secret; listed and ordered by their own
tenant only (another tenant gets 404 or unknown_image), deleted once no instance uses them."""

import base64
import json

import pytest

from compute.models import Image
from instances.models import Instance
from instances.provisioning import converge
from starverse.core import kube
from tests.factories import converge_until, fund, make_user

REFERENCE = "docker.io/pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime"


def _bring(client, **body):
    return client.post(
        "/api/v1/images", {"name": "torch", "reference": REFERENCE, **body}, format="json"
    )


def test_a_brought_image_is_listed_for_its_tenant_only(db, client_for):
    owner, stranger = make_user(), make_user()
    mine, theirs = client_for(owner), client_for(stranger)

    answer = _bring(mine)

    assert answer.status_code == 201
    body = answer.json()
    assert (body["name"], body["status"], body["reference"], body["owner"]) == (
        "torch",
        "ready",
        REFERENCE,
        "me",
    )
    assert body["id"].startswith("img_")
    assert [i["id"] for i in mine.get("/api/v1/images?owner=me").json()["results"]] == [body["id"]]
    assert body["id"] in [i["id"] for i in mine.get("/api/v1/images").json()["results"]]
    assert mine.get(f"/api/v1/images/{body['id']}").json()["reference"] == REFERENCE
    # another tenant never sees it
    assert theirs.get("/api/v1/images?owner=me").json()["results"] == []
    assert body["id"] not in [i["id"] for i in theirs.get("/api/v1/images").json()["results"]]
    assert theirs.get(f"/api/v1/images/{body['id']}").status_code == 404
    assert theirs.delete(f"/api/v1/images/{body['id']}").status_code == 404
    assert Image.objects.get(pk=body["id"]).active is True


@pytest.mark.parametrize(
    ("reference", "code"),
    [
        ("not a reference", "invalid_reference"),
        ("docker.io/pytorch/pytorch", "invalid_reference"),  # neither tag nor digest
        ("evil.example.com/miner:1.0", "registry_not_allowed"),
    ],
)
def test_a_bad_or_unallowed_reference_is_refused_and_nothing_is_made(
    db, client_for, reference, code
):
    user = make_user()
    answer = _bring(client_for(user), reference=reference)

    assert answer.status_code == 400
    assert answer.json()["code"] == code
    assert not Image.objects.filter(tenant_id=user.tenant_id).exists()


def test_a_digest_reference_and_an_operator_allowed_registry_are_taken(db, client_for, settings):
    settings.IMAGE_ALLOWED_REGISTRIES = ["registry.example.cn:5000"]
    client = client_for(make_user())
    digest = "sha256:" + "a" * 64

    answer = _bring(client, reference=f"registry.example.cn:5000/team/env@{digest}")

    assert answer.status_code == 201
    assert answer.json()["reference"] == f"registry.example.cn:5000/team/env@{digest}"
    assert _bring(client, name="hub", reference="ubuntu:22.04").json()["code"] == (
        "registry_not_allowed"
    )


def test_the_same_name_twice_is_a_conflict(db, client_for):
    client = client_for(make_user())
    assert _bring(client).status_code == 201
    again = _bring(client)
    assert again.status_code == 409
    assert again.json()["code"] == "image_name_taken"


def test_credentials_become_a_pull_secret_that_the_pod_uses(renter, catalog, cluster):
    user, client = renter
    answer = _bring(client, credentials={"username": "robot", "password": "s3cret-token"})
    assert answer.status_code == 201
    assert "s3cret-token" not in answer.content.decode()
    image = Image.objects.get(pk=answer.json()["id"])
    assert "s3cret-token" not in json.dumps(
        Image.objects.filter(pk=image.pk).values().get(), default=str
    )
    namespace = kube.namespace_name(user.tenant_id)
    secret = kube.read("Secret", namespace, image.pull_secret)
    assert secret is not None
    assert secret is not None
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    assert config["auths"]["https://index.docker.io/v1/"]["username"] == "robot"

    ordered = client.post(
        "/api/v1/instances",
        {"offering": catalog["h100x1"].id, "image": image.id},
        format="json",
    )
    assert ordered.status_code == 202
    instance_id = ordered.json()["id"]
    assert converge_until(converge.provision, instance_id) == "running"
    instance = Instance.objects.get(pk=instance_id)
    found = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    assert found is not None
    spec = found["spec"]
    assert spec["imagePullSecrets"] == [{"name": image.pull_secret}]
    assert spec["containers"][0]["image"] == REFERENCE

    # in use: deleting it is refused, and nothing changes
    refused = client.delete(f"/api/v1/images/{image.id}")
    assert refused.status_code == 409 and refused.json()["code"] == "image_in_use"
    assert Image.objects.get(pk=image.pk).active is True

    client.delete(f"/api/v1/instances/{instance_id}")
    assert converge_until(converge.terminate, instance_id) == "terminated"
    assert client.delete(f"/api/v1/images/{image.id}").status_code == 204
    assert kube.read("Secret", namespace, image.pull_secret) is None
    assert client.get(f"/api/v1/images/{image.id}").status_code == 404
    assert client.get("/api/v1/images?owner=me").json()["results"] == []
    again = client.post(
        "/api/v1/instances", {"offering": catalog["h100x1"].id, "image": image.id}, format="json"
    )
    assert again.status_code == 400 and again.json()["code"] == "unknown_image"


def test_another_tenant_cannot_order_the_image(renter, catalog, client_for):
    _user, client = renter
    image_id = _bring(client).json()["id"]
    stranger = make_user()
    fund(stranger, 100_000)

    answer = client_for(stranger).post(
        "/api/v1/instances", {"offering": catalog["h100x1"].id, "image": image_id}, format="json"
    )

    assert answer.status_code == 400
    assert answer.json()["code"] == "unknown_image"
    assert not Instance.objects.filter(tenant_id=stranger.tenant_id).exists()


def test_the_rent_form_offers_the_image_to_its_tenant_only(catalog, client_for):
    from django.test import Client

    owner, stranger = make_user(), make_user()
    image_id = _bring(client_for(owner)).json()["id"]
    pages = {}
    for who in (owner, stranger):
        browser = Client()
        browser.force_login(who)
        pages[who] = browser.get("/console/rent/").content.decode()

    assert f'value="{image_id}"' in pages[owner]
    assert image_id not in pages[stranger]
    assert 'value="pytorch-2.1"' in pages[stranger]
