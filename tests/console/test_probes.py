"""/healthz and /readyz: answered before the HTTPS redirect and the Host check (kubelets probe
the pod's IP over plain HTTP), each readiness check bounded and named when it fails."""

import time

import pytest

from starverse.celery import app as celery_app
from starverse.core import kube

POD_IP = "10.244.3.17:8000"


@pytest.fixture
def production_like(settings):
    settings.ALLOWED_HOSTS = ["console.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    settings.DEBUG = False


def test_healthz_answers_a_kubelet_without_touching_the_database(client, production_like):
    # no `db` fixture: any query would fail the test
    answer = client.get("/healthz", HTTP_HOST=POD_IP)

    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}
    assert answer["Cache-Control"] == "no-store"


def test_readyz_checks_database_and_broker_in_the_web_tier(client, db, production_like, settings):
    settings.KUBE_ACCESS = False
    settings.KUBECONFIG = "in-cluster"  # the web tier knows a cluster exists, never calls it

    answer = client.get("/readyz", HTTP_HOST=POD_IP)

    assert answer.status_code == 200
    assert answer.json() == {
        "status": "ok",
        "checks": {"database": "ok", "broker": "ok"},
        "failed": [],
    }


def test_the_host_check_and_https_redirect_still_hold_for_every_other_page(
    client, db, production_like
):
    assert client.get("/accounts/login/", HTTP_HOST=POD_IP).status_code == 400
    assert client.get("/accounts/login/", HTTP_HOST="console.example.com").status_code == 301


def test_readyz_names_a_broker_that_does_not_answer(client, db, settings):
    settings.KUBE_ACCESS = False
    old = celery_app.conf.broker_url
    celery_app.conf.update(broker_url="redis://127.0.0.1:1/0")  # nothing listens on port 1
    try:
        started = time.monotonic()
        answer = client.get("/readyz")
        took = time.monotonic() - started
    finally:
        celery_app.conf.update(broker_url=old)

    assert answer.status_code == 503
    body = answer.json()
    assert body["status"] == "unavailable"
    assert body["failed"] == ["broker"]
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["broker"].startswith("failed: ")
    assert "127.0.0.1" not in body["checks"]["broker"]  # no URL (nor a password in it) leaks
    assert took < 10


def test_readyz_checks_the_cluster_in_the_worker(client, db, cluster, settings):
    settings.KUBE_ACCESS = True

    answer = client.get("/readyz")

    assert answer.status_code == 200
    assert answer.json()["checks"] == {"database": "ok", "broker": "ok", "cluster": "ok"}


def test_readyz_fails_on_a_cluster_api_that_is_down(client, db, settings, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: down\n"
        "clusters: [{name: down, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: down, user: {token: x}}]\n"
        "contexts: [{name: down, context: {cluster: down, user: down}}]\n"
    )
    settings.KUBE_ACCESS = True
    settings.KUBECONFIG = str(kubeconfig)
    kube._api_client.cache_clear()
    try:
        answer = client.get("/readyz")
    finally:
        kube._api_client.cache_clear()

    assert answer.status_code == 503
    assert answer.json()["failed"] == ["cluster"]
    assert answer.json()["checks"]["cluster"] == "failed: RetryableKubeError"


def test_probes_answer_get_only(client, db):
    assert client.post("/healthz").status_code in (403, 404, 405)
