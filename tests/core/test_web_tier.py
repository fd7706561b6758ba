"""The web tier holds no cluster credentials (docs/operator-guide.md "Cluster credentials"): with
KUBE_ACCESS off, every call of the Kubernetes client is refused, and the console, the API, the node
agents' endpoints and the admin still answer every page and action, because only the worker's tasks
talk to the cluster. The cluster (the local emulator) is configured all along, so a request
that reached for it would be refused here instead of quietly succeeding."""

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.contrib import admin
from django.urls import reverse

from fleet.choices import NodeState
from fleet.models import Node
from fleet.services import health_rules_ensure_defaults, node_cordon, node_token_issue
from fleet.tasks import mirror_node_schedulable
from instances.models import Instance
from instances.provisioning import converge
from starverse.core import kube
from starverse.core.adminurls import admin_change_url
from tests.factories import (
    converge_until,
    fund,
    make_operator,
    make_ssh_key,
    make_user,
    staff_login,
)
from tests.fleet.test_fleet import _iso, _report


@contextmanager
def as_worker(settings: Any) -> Iterator[None]:
    """What the worker does between two requests (it may talk to the cluster)."""
    settings.KUBE_ACCESS = True
    try:
        yield
    finally:
        settings.KUBE_ACCESS = False


@pytest.fixture
def web_tier(catalog: dict[str, Any], settings: Any) -> dict[str, Any]:
    settings.KUBE_ACCESS = False
    return catalog


def test_without_cluster_access_every_kube_call_is_refused(cluster, settings):
    settings.KUBE_ACCESS = False

    for call in (
        kube.nodes_list,
        lambda: kube.read("Namespace", None, "default"),
        lambda: kube.ensure(kube.namespace("ten_abc")),
        kube.tenant_namespaces,
        kube.warning_events,
    ):
        with pytest.raises(kube.KubeAccessRefused, match="KUBE_ACCESS is off"):
            call()
    with pytest.raises(kube.KubeAccessRefused, match="KUBE_ACCESS is off"):
        kube.exec_open("sv-abc", "inst-abc", container="main", command=["sh"])
    # a programming error, not a cluster error: no `except KubeError` hides it
    assert not issubclass(kube.KubeAccessRefused, kube.KubeError)
    settings.KUBE_ACCESS = True
    assert kube.read("Namespace", None, "default") is not None


def test_an_exec_only_process_may_make_no_other_call(cluster, settings):
    settings.KUBE_ACCESS = "exec"  # the terminal service

    for call in (
        kube.nodes_list,
        lambda: kube.read("Pod", "sv-abc", "inst-abc"),
        lambda: kube.ensure(kube.namespace("ten_abc")),
        lambda: kube.delete("Pod", "sv-abc", "inst-abc"),
        kube.tenant_namespaces,
        kube.warning_events,
    ):
        with pytest.raises(kube.KubeAccessRefused, match="may only open exec sessions"):
            call()
    # exec itself reaches the cluster (which has no such pod)
    with pytest.raises(kube.PermanentKubeError, match="404"):
        kube.exec_open("sv-abc", "inst-abc", container="main", command=["sh"])


def test_in_cluster_credentials_outside_a_cluster_say_so(settings, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    settings.KUBECONFIG = kube.IN_CLUSTER
    kube._api_client.cache_clear()

    with pytest.raises(kube.ClusterNotConfigured, match="Cannot load KUBECONFIG=in-cluster"):
        kube.nodes_list()
    kube._api_client.cache_clear()


def _ok(response: Any) -> Any:
    assert response.status_code < 500, (response.status_code, response.content[:300])
    return response


def test_the_console_and_the_api_work_without_cluster_access(web_tier, client, api, settings):
    user = make_user()
    fund(user, 1_000_000)
    client.force_login(user)
    form = re.search(
        r'name="token" value="([^"]+)"', _ok(client.get("/console/rent/")).content.decode()
    )
    assert form is not None
    ordered = client.post(
        "/console/rent/",
        {
            "offering": web_tier["h100x1"].id,
            "image": web_tier["image"].id,
            "billing": "hourly",
            "name": "llama-ft",
            "token": form.group(1),
        },
    )
    instance = Instance.objects.get(tenant=user.tenant)
    assert ordered.status_code == 302 and instance.status == "provisioning"
    with as_worker(settings):
        assert converge_until(converge.provision, instance.id) == "running"
    make_ssh_key(user)  # the access Secret is rendered again by a task, not by the request
    assert _ok(client.get("/")).status_code == 302  # home leads a signed-in user to the console
    pages = [
        "/healthz",
        "/console/",
        "/console/rent/",
        "/console/instances/",
        f"/console/instances/{instance.id}/",
        "/console/disks/",
        "/console/datasets/",
        "/billing/",
        "/billing/calculator/",
        "/accounts/tokens/",
        "/accounts/ssh-keys/",
    ]
    for page in pages:
        assert _ok(client.get(page)).status_code == 200, page
    _ok(client.post("/console/disks/new/", {"name": "ckpt", "size_gb": "100"}))
    _ok(client.post("/console/nas/", {"size_gb": "100"}))
    assert _ok(client.post(f"/console/instances/{instance.id}/stop/")).status_code == 302
    with as_worker(settings):
        assert converge_until(converge.stop, instance.id) == "stopped"
    _ok(client.post(f"/console/instances/{instance.id}/start/"))
    _ok(client.post(f"/console/instances/{instance.id}/terminate/"))

    api.force_authenticate(user)
    for path in ("/api/v1/me", "/api/v1/offerings", "/api/v1/instances", "/api/v1/disks"):
        assert _ok(api.get(path)).status_code == 200, path
    created = api.post(
        "/api/v1/instances",
        {"offering": web_tier["h100x1"].id, "image": "pytorch-2.1"},
        format="json",
    )
    assert created.status_code == 202
    assert _ok(api.post(f"/api/v1/instances/{created.json()['id']}/stop")).status_code == 202
    assert _ok(api.get(f"/api/v1/instances/{created.json()['id']}")).status_code == 200


def test_an_agent_report_that_cordons_a_cluster_node_works_without_cluster_access(
    web_tier, api, django_capture_on_commit_callbacks
):
    health_rules_ensure_defaults()
    node = Node.objects.filter(in_cluster=True, gpu_product__contains="H100").first()
    assert node is not None
    token = node_token_issue(node=node)
    xid = {
        "at": _iso(),
        "type": "xid",
        "gpu": 0,
        "uuid": f"GPU-{node.name}-0",
        "xid": 79,
        "message": "GPU has fallen off the bus",
    }

    with django_capture_on_commit_callbacks(execute=False) as after_commit:
        answer = api.post(
            f"/api/v1/nodes/{node.name}/report",
            _report(node=node.name, events=[xid]),
            format="json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )

    assert answer.status_code == 202
    node.refresh_from_db()
    assert node.state == NodeState.CORDONED
    # the cordon reaches the cluster through the worker
    assert "fleet.tasks.mirror_node_schedulable" in [c.args[0] for c in after_commit]


def test_the_admin_works_without_cluster_access(web_tier, client, settings):
    operator = make_operator()
    operator.is_superuser = True
    operator.save(update_fields=["is_superuser"])
    staff_login(client, operator)
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        changelist = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        assert _ok(client.get(changelist)).status_code == 200, changelist
        if model_admin.has_add_permission(_request(operator)):
            add = reverse(f"admin:{meta.app_label}_{meta.model_name}_add")
            assert _ok(client.get(add)).status_code == 200, add
    node = Node.objects.filter(in_cluster=True).first()
    assert node is not None
    _ok(client.get(admin_change_url("fleet_node", node.pk)))
    for action, data in (
        ("cordon", {"reason": "maintenance"}),
        ("uncordon", {}),
        ("drain", {"reason": "maintenance"}),
        ("uncordon", {}),
        ("token", {}),
        ("reset", {}),
    ):
        url = reverse("admin:fleet_node_state", args=[node.pk, action])
        _ok(client.get(url))
        assert _ok(client.post(url, data)).status_code == 302, action
    node.refresh_from_db()
    assert (node.state, node.token_hash) == (NodeState.READY, None)


def _request(user: Any) -> Any:
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = user
    return request


def test_a_cordon_reaches_the_cluster_through_the_worker(
    catalog, cluster, django_capture_on_commit_callbacks
):
    node = Node.objects.filter(in_cluster=True).order_by("name")[0]

    with django_capture_on_commit_callbacks(execute=False) as after_commit:
        node_cordon(node=node, reason="maintenance", actor=make_operator())
    unschedulable = {n.name: n.unschedulable for n in kube.nodes_list()}
    assert unschedulable[node.name] is False  # the request itself changed nothing there
    assert after_commit[0].args[:2] == ("fleet.tasks.mirror_node_schedulable", (node.pk,))

    after_commit[0]()

    assert {n.name: n.unschedulable for n in kube.nodes_list()}[node.name] is True
    Node.objects.filter(pk=node.pk).update(state=NodeState.READY)
    mirror_node_schedulable(node.pk)  # the task reads the state as it is when it runs
    assert {n.name: n.unschedulable for n in kube.nodes_list()}[node.name] is False
