"""Each node's agent holds its own credential: one node's token reports for that node only, and
an operator resets a node's registration to rotate it (its agent registers again with the
bootstrap token)."""

from fleet.choices import NodeEventKind
from fleet.models import GpuSample, Node, NodeEvent
from fleet.services import node_token_issue, node_token_revoke
from tests.factories import make_operator, staff_login
from tests.fleet.test_fleet import H100, _report


def _node(name):
    return Node.objects.create(
        name=name, gpu_product=H100, gpu_count=8, gpu_memory_mb=81559, interconnect="nvlink"
    )


def _post(api, name, token):
    return api.post(
        f"/api/v1/nodes/{name}/report",
        _report(node=name),
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def test_a_nodes_token_cannot_report_as_another_node(api, db):
    a, b = _node("gpu-h100-a"), _node("gpu-h100-b")
    token_a, token_b = node_token_issue(node=a), node_token_issue(node=b)

    stolen = _post(api, b.name, token_a)

    assert stolen.status_code == 401
    assert GpuSample.objects.filter(gpu__node=b).count() == 0
    b.refresh_from_db()
    assert b.last_report_at is None
    assert _post(api, b.name, token_b).status_code == 202
    assert _post(api, a.name, token_a).status_code == 202


def test_a_reset_registration_lets_only_a_new_registration_in(api, db, settings):
    settings.NODE_BOOTSTRAP_TOKEN = "boot-7f3a9c"
    node = _node("gpu-h100-c")
    old = node_token_issue(node=node)
    body = {
        "name": node.name,
        "bootstrap_token": "boot-7f3a9c",
        "gpu_product": H100,
        "gpu_count": 8,
        "gpu_memory_mb": 81559,
    }
    assert api.post("/api/v1/nodes/register", body, format="json").status_code == 409

    node_token_revoke(node=node)

    assert _post(api, node.name, old).status_code == 401
    registered = api.post("/api/v1/nodes/register", body, format="json")
    assert registered.status_code == 201
    assert _post(api, node.name, registered.json()["token"]).status_code == 202
    assert api.post("/api/v1/nodes/register", body, format="json").status_code == 409
    assert list(
        NodeEvent.objects.filter(node=node, kind=NodeEventKind.TOKEN_RESET).values_list(
            "message", flat=True
        )
    ) == ["Agent registration reset: the agent registers again with the bootstrap token."]


def test_the_admin_resets_a_nodes_registration(client, db):
    node = _node("gpu-h100-d")
    node_token_issue(node=node)
    staff_login(client, make_operator())

    page = client.get(f"/admin/fleet/node/{node.pk}/reset/")
    node.refresh_from_db()
    assert page.status_code == 200 and node.token_hash is not None  # a GET only asks
    done = client.post(f"/admin/fleet/node/{node.pk}/reset/", follow=True)

    node.refresh_from_db()
    assert (node.token_hash, node.token_prefix) == (None, "")
    assert "registers again with the bootstrap token" in done.content.decode()
