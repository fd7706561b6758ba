"""Academic mirrors (issue 29): the operator's MIRROR_* settings reach an instance's pod as
environment variables, unless the order says `mirrors: false`; with none configured nothing is
injected; the field round-trips through the API; the init passes them on to SSH sessions."""

import pytest
from django.urls import reverse
from starverse_init.environment import session_environment

from instances.lifecycle import instance_order
from instances.models import Instance
from instances.provisioning import converge
from starverse.core import kube
from tests.factories import converge_until, fund, make_user

MIRROR_ENV = {
    "PIP_INDEX_URL": "https://mirrors.example.edu.cn/pypi/simple",
    "UV_DEFAULT_INDEX": "https://mirrors.example.edu.cn/pypi/simple",
    "CONDA_CHANNELS": "https://mirrors.example.edu.cn/conda/main,"
    "https://mirrors.example.edu.cn/conda/forge",
    "HF_ENDPOINT": "https://hf-mirror.example.com",
    "GITHUB_PROXY": "https://ghproxy.example.com/",
}


@pytest.fixture
def mirrored(settings):
    settings.MIRROR_PIP_INDEX_URL = "https://mirrors.example.edu.cn/pypi/simple"
    settings.MIRROR_CONDA_CHANNELS = [
        "https://mirrors.example.edu.cn/conda/main",
        "https://mirrors.example.edu.cn/conda/forge",
    ]
    settings.MIRROR_HF_ENDPOINT = "https://hf-mirror.example.com"
    settings.MIRROR_GITHUB_PROXY = "https://ghproxy.example.com/"
    settings.MIRROR_REGISTRIES = ["docker.m.example.com"]
    return settings


def _order_and_run(client_for, catalog, **body):
    user = make_user()
    fund(user, 100_000)
    client = client_for(user)
    order = {"offering": catalog["h100x1"].id, "image": catalog["image"].id, **body}
    answer = client.post("/api/v1/instances", order, format="json")
    assert answer.status_code == 202, answer.json()
    instance_id = answer.json()["id"]
    assert converge_until(converge.provision, instance_id) == "running"
    instance = Instance.objects.get(pk=instance_id)
    pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    assert pod is not None
    env = {item["name"]: item["value"] for item in pod["spec"]["containers"][0]["env"]}
    return client, answer.json(), env


def test_a_pod_of_an_instance_with_mirrors_gets_them_in_its_environment(
    mirrored, catalog, client_for
):
    client, created, env = _order_and_run(client_for, catalog)

    assert created["mirrors"] is True
    assert {name: env.get(name) for name in MIRROR_ENV} == MIRROR_ENV
    assert "docker.m.example.com" not in env.values()  # registries: shown only
    assert client.get(f"/api/v1/instances/{created['id']}").json()["mirrors"] is True


def test_mirrors_false_keeps_them_out_and_round_trips(mirrored, catalog, client_for):
    client, created, env = _order_and_run(client_for, catalog, mirrors=False)

    assert created["mirrors"] is False
    assert not set(MIRROR_ENV) & set(env)
    assert "STARVERSE_INSTANCE_ID" in env  # the rest of the environment is there
    assert client.get(f"/api/v1/instances/{created['id']}").json()["mirrors"] is False
    listed = client.get("/api/v1/instances").json()["results"]
    assert [row["mirrors"] for row in listed if row["id"] == created["id"]] == [False]


def test_with_no_mirrors_configured_nothing_is_injected(catalog, client_for):
    _client, created, env = _order_and_run(client_for, catalog)

    assert created["mirrors"] is True
    assert not set(MIRROR_ENV) & set(env)


def test_a_non_boolean_mirrors_is_a_400(catalog, client_for):
    user = make_user()
    fund(user, 100_000)
    order = {"offering": catalog["h100x1"].id, "image": catalog["image"].id, "mirrors": "maybe"}
    answer = client_for(user).post("/api/v1/instances", order, format="json")
    assert answer.status_code == 400
    assert "mirrors" in str(answer.json())


def test_ssh_sessions_see_the_mirror_variables():
    seen = session_environment({**MIRROR_ENV, "UNRELATED": "x"})
    assert {name: seen.get(name) for name in MIRROR_ENV} == MIRROR_ENV
    assert "UNRELATED" not in seen


def test_the_rent_page_lists_the_mirrors_and_offers_to_turn_them_off(mirrored, catalog, client):
    user = make_user()
    client.force_login(user)
    page = client.get(reverse("instances:rent")).content.decode()
    assert "Academic mirrors" in page
    assert "https://hf-mirror.example.com" in page and "docker.m.example.com" in page
    assert 'name="no_mirrors"' in page


def test_the_rent_page_says_nothing_of_mirrors_when_none_is_configured(catalog, client):
    client.force_login(make_user())
    page = client.get(reverse("instances:rent")).content.decode()
    assert "Academic mirrors" not in page and 'name="no_mirrors"' not in page


def test_the_instance_page_shows_its_mirrors_or_that_they_are_off(mirrored, catalog, client):
    user = make_user()
    fund(user, 100_000)
    on, _created = instance_order(
        user=user, offering_id=catalog["h100x1"].id, image_id=catalog["image"].id
    )
    off, _created = instance_order(
        user=user,
        offering_id=catalog["h100x1"].id,
        image_id=catalog["image"].id,
        mirrors=False,
        idempotency_key="second",
    )
    client.force_login(user)

    shown = client.get(reverse("instances:detail", args=[on.id])).content.decode()
    assert "https://mirrors.example.edu.cn/pypi/simple" in shown
    hidden = client.get(reverse("instances:detail", args=[off.id])).content.decode()
    assert "Off: ordered without them" in hidden
    assert "https://mirrors.example.edu.cn/pypi/simple" not in hidden


def test_another_tenants_instance_page_is_a_404(mirrored, catalog, client):
    user = make_user()
    fund(user, 100_000)
    instance, _created = instance_order(
        user=user, offering_id=catalog["h100x1"].id, image_id=catalog["image"].id
    )
    client.force_login(make_user())
    assert client.get(reverse("instances:detail", args=[instance.id])).status_code == 404
