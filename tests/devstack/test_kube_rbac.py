"""The kube emulator's RBAC, on when it is given users: tokens name users, unknown tokens are
401, and each request is allowed only by the rules bound to its user, answered 403 in the
apiserver's words otherwise; a binding needs `bind` on its role, and its roleRef never changes."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from devstack.kube import KubeEmulator
from devstack.kube.rbac import User
from devstack.kube.resources import ROLE_BINDINGS
from tests.conftest import KUBE_TIMINGS

RBAC = "rbac.authorization.k8s.io"
ROBOT = "system:serviceaccount:ops:robot"
USERS = {
    "robot-token": User(ROBOT),
    "admin-token": User("admin", ("system:masters",)),
    "viewer-token": User("viewer", ("viewers",)),
}


@pytest.fixture(scope="module")
def rbac_emu() -> Iterator[KubeEmulator]:
    emulator = KubeEmulator(fleet={"h100": 1}, users=USERS, **KUBE_TIMINGS).start()
    yield emulator
    emulator.stop()


@pytest.fixture
def as_user(rbac_emu: KubeEmulator, tmp_path: Path):
    rbac_emu.reset()
    rbac_emu.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            for name in ("team-a", "team-b")
        ]
    )
    clients = []

    def build(token: str) -> client.ApiClient:
        path = rbac_emu.write_kubeconfig(tmp_path / f"{token}.kubeconfig", token=token)
        api_client = config.new_client_from_config(config_file=str(path))
        clients.append(api_client)
        return api_client

    yield build
    for api_client in clients:
        api_client.close()


def _role(name: str, rules: list[dict]) -> dict:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }


def _binding(kind: str, name: str, role: str, subject: dict, namespace: str = "") -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
        "subjects": [subject],
    }


ROBOT_SUBJECT = {"kind": "ServiceAccount", "name": "robot", "namespace": "ops"}


def _status(call) -> int:
    try:
        call()
    except ApiException as error:
        return error.status
    return 200


def test_an_unknown_token_is_401_and_a_known_one_may_read_discovery(as_user):
    stranger = client.CoreV1Api(as_user("guess"))
    robot = as_user("robot-token")

    assert _status(lambda: stranger.list_namespace()) == 401
    assert client.VersionApi(robot).get_code().git_version.endswith("-starverse-emulator")
    assert _status(lambda: client.CoreV1Api(robot).list_namespace()) == 403


def test_a_role_binding_grants_its_rules_in_its_namespace_only(rbac_emu, as_user):
    rbac_emu.apply(
        [
            _role("pod-reader", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]),
            _binding("RoleBinding", "read", "pod-reader", ROBOT_SUBJECT, "team-a"),
        ]
    )
    robot = client.CoreV1Api(as_user("robot-token"))

    assert robot.list_namespaced_pod("team-a").items == []
    with pytest.raises(ApiException) as refused:
        robot.list_namespaced_pod("team-b")
    assert refused.value.status == 403
    assert refused.value.reason == "Forbidden"
    assert (
        f'pods is forbidden: User "{ROBOT}" cannot list resource "pods" in API group "" in '
        'the namespace "team-b"'
    ) == json.loads(refused.value.body)["message"]
    assert _status(lambda: robot.list_pod_for_all_namespaces()) == 403
    assert _status(lambda: robot.list_namespaced_secret("team-a")) == 403


def test_cluster_bindings_names_groups_and_subresources(rbac_emu, as_user):
    rbac_emu.apply(
        [
            _role(
                "node-stats",
                [
                    {"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]},
                    {
                        "apiGroups": [""],
                        "resources": ["namespaces"],
                        "resourceNames": ["team-a"],
                        "verbs": ["get"],
                    },
                ],
            ),
            _binding(
                "ClusterRoleBinding", "viewers", "node-stats", {"kind": "Group", "name": "viewers"}
            ),
        ]
    )
    viewer = client.CoreV1Api(as_user("viewer-token"))
    node = rbac_emu.node_specs[0].name

    assert _status(lambda: viewer.connect_get_node_proxy_with_path(node, "healthz")) == 200
    assert _status(lambda: viewer.read_node(node)) == 403  # nodes/proxy is not nodes
    assert viewer.read_namespace("team-a").metadata.name == "team-a"
    assert _status(lambda: viewer.read_namespace("team-b")) == 403  # another name
    assert _status(lambda: viewer.list_namespace()) == 403  # a list names nothing


def test_system_masters_may_do_anything(as_user):
    admin = client.CoreV1Api(as_user("admin-token"))

    assert {n.metadata.name for n in admin.list_namespace().items} >= {"team-a", "team-b"}
    assert admin.list_secret_for_all_namespaces().items == []


def test_a_binding_needs_bind_on_its_role(rbac_emu, as_user):
    rbac_emu.apply(
        [
            _role(
                "binder",
                [
                    {"apiGroups": [RBAC], "resources": ["rolebindings"], "verbs": ["create"]},
                    {
                        "apiGroups": [RBAC],
                        "resources": ["clusterroles"],
                        "resourceNames": ["tenant"],
                        "verbs": ["bind"],
                    },
                ],
            ),
            _binding("ClusterRoleBinding", "binder", "binder", ROBOT_SUBJECT),
        ]
    )
    robot = client.RbacAuthorizationV1Api(as_user("robot-token"))

    robot.create_namespaced_role_binding(
        "team-a", _binding("RoleBinding", "tenant", "tenant", ROBOT_SUBJECT, "team-a")
    )
    with pytest.raises(ApiException) as refused:
        robot.create_namespaced_role_binding(
            "team-a", _binding("RoleBinding", "root", "cluster-admin", ROBOT_SUBJECT, "team-a")
        )
    assert refused.value.status == 403
    assert "is attempting to grant RBAC permissions not currently held" in refused.value.body
    assert [b["metadata"]["name"] for b in rbac_emu.store.items(ROLE_BINDINGS, "team-a")] == [
        "tenant"
    ]


def test_a_bindings_role_cannot_change(rbac_emu, as_user):
    rbac_emu.apply([_binding("RoleBinding", "read", "pod-reader", ROBOT_SUBJECT, "team-a")])
    admin = client.RbacAuthorizationV1Api(as_user("admin-token"))
    binding = admin.read_namespaced_role_binding("read", "team-a")
    binding.role_ref.name = "cluster-admin"

    with pytest.raises(ApiException) as refused:
        admin.replace_namespaced_role_binding("read", "team-a", binding)

    assert refused.value.status == 422
    assert "cannot change roleRef" in refused.value.body
