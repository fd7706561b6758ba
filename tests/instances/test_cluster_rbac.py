"""The worker's cluster rights as deploy/k8s/platform.yaml grants them are enough for all it
does, and no more: against a local cluster that enforces RBAC (the kube emulator given users),
with the manifest's ServiceAccounts, ClusterRoles and ClusterRoleBinding applied, the worker
provisions, stops and terminates an instance, changes its gateway routes, makes, grows and
deletes a disk and a NAS, reads the NAS's usage, reconciles, sweeps the tenant namespaces,
execs a command into a pod (a cluster's pre-flight check) and cordons a node, never
refused; and it is refused everywhere outside the tenant namespaces."""

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from kubernetes.client.exceptions import ApiException

from compute.models import Offering
from devstack.kube import KubeEmulator
from devstack.kube.rbac import User
from fleet.models import Node
from fleet.services import node_cordon, node_schedulable_mirror, nodes_sync_from_cluster
from instances.gateway import instance_ports_set
from instances.lifecycle import instance_order, instance_stop, instance_terminate
from instances.provisioning import converge
from instances.provisioning.namespaces import tenant_namespaces_sweep
from instances.provisioning.reconcile import reconcile
from starverse.core import kube
from storage import provisioning as storage
from storage.disks import disk_create, disk_delete, disk_resize
from storage.nas import nas_delete, nas_set_size
from tests.conftest import FLEET, KUBE_TIMINGS
from tests.factories import converge_until, fund, make_operator, make_ssh_key, make_user

PLATFORM = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "platform.yaml"
WORKER = "system:serviceaccount:starverse-system:starverse-worker"
TERMINAL = "system:serviceaccount:starverse-system:starverse-terminal"
USERS = {
    "worker-token": User(WORKER),
    "terminal-token": User(TERMINAL),
    "admin-token": User("admin", ("system:masters",)),
}
# What the emulator serves of the manifest; the rest (Deployments, admission policies) is the
# real cluster's business.
RBAC_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")


@pytest.fixture(scope="module")
def rbac_emulator() -> Iterator[KubeEmulator]:
    emulator = KubeEmulator(fleet=FLEET, users=USERS, **KUBE_TIMINGS).start()
    yield emulator
    emulator.stop()


@pytest.fixture
def as_worker(
    rbac_emulator: KubeEmulator, db: Any, settings: Any, tmp_path: Path
) -> Iterator[KubeEmulator]:
    """The platform pointed at the RBAC cluster with the worker's token, the manifest's RBAC
    applied, the catalog seeded and the nodes mirrored (itself a worker call)."""
    rbac_emulator.reset()
    documents = [doc for doc in yaml.safe_load_all(PLATFORM.read_text()) if doc]
    rbac_emulator.apply([doc for doc in documents if doc["kind"] in RBAC_KINDS])
    kubeconfig = rbac_emulator.write_kubeconfig(tmp_path / "worker", token="worker-token")
    settings.KUBECONFIG = str(kubeconfig)
    settings.GATEWAY_CIDR = ["192.0.2.0/24"]
    settings.TENANT_SWEEP_CALLS_PER_S = 1000
    kube._api_client.cache_clear()
    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    yield rbac_emulator
    kube._api_client.cache_clear()


def _forbidden_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "kube.forbidden" in r.getMessage()]


def test_the_manifest_grants_the_worker_all_it_does(as_worker, db, settings, caplog):
    caplog.set_level(logging.WARNING)
    user = make_user()
    fund(user, 10_000_000)
    make_ssh_key(user)
    nas, _created = nas_set_size(user=user, size_gb=100)
    assert storage.nas_ensure(nas.id) == "ready"
    disk = disk_create(user=user, name="ckpt", size_gb=100)
    assert storage.disk_ensure(disk.id) == "available"
    disk_resize(tenant_id=user.tenant_id, disk_id=disk.id, size_gb=200)
    assert storage.disk_ensure(disk.id) == "available"  # the claim grows (patch)
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    instance, _ = instance_order(
        user=user, offering_id=offering.id, image_id="pytorch-2.1", ports=[6006]
    )
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    namespace = instance.k8s_namespace
    assert converge.access_refresh(instance.id) is True  # the Secret rendered again (update)
    instance_ports_set(instance_id=instance.id, ports=[7860])
    assert len(converge.ports_converge(instance.id)) == 4  # a route and a Service, each way
    # a cluster's pre-flight check execs into rank 0 (pods/exec create)
    code, output = kube.exec_run(
        namespace, instance.k8s_name, container="main", command=["echo", "ok"], timeout=10
    )
    assert (code, output.strip()) == (0, "ok")

    nas.refresh_from_db()
    as_worker.set_volume_usage(namespace, nas.k8s_name, 5 * 2**30)
    assert storage.nas_usage_refresh() == 1  # the kubelet's stats, through nodes/proxy
    report = reconcile()
    assert (report.recreated, report.orphans) == ([], [])
    settings.GATEWAY_CIDR = ["198.51.100.0/24"]
    assert tenant_namespaces_sweep().updated == [namespace]  # binding, policy, labels
    node = Node.objects.get(pk=instance.node_id)
    node_cordon(node=node, reason="maintenance", actor=make_operator())
    assert node_schedulable_mirror(node_id=node.pk) is True
    # the node lease watch (fleet.liveness): list, then watch from the list's version
    version, leases = kube.node_leases()
    assert node.name in {lease.node for lease in leases}
    assert isinstance(list(kube.node_leases_watch(version, timeout_s=1)), list)

    instance_stop(instance_id=instance.id)
    assert converge_until(converge.stop, instance.id) == "stopped"
    instance_terminate(instance_id=instance.id)
    assert converge_until(converge.terminate, instance.id) == "terminated"
    disk_delete(tenant_id=user.tenant_id, disk_id=disk.id)
    assert storage.disk_remove(disk.id) == "deleted"
    nas_delete(tenant_id=user.tenant_id)
    assert storage.nas_remove(nas.id) == "deleted"

    assert _forbidden_logged(caplog) == []
    binding = kube.read("RoleBinding", namespace, "starverse-tenant")
    assert binding is not None and binding["subjects"][0]["name"] == "starverse-worker"


def _refused(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status == 403
    return json.loads(refused.value.body)


def test_the_worker_is_refused_outside_the_tenant_namespaces(as_worker, db):
    user = make_user()
    kube.tenant_namespace_ensure(user.tenant_id)
    namespace = kube.namespace_name(user.tenant_id)
    core = kube.core()
    rbac = kube._rbac()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x"},
        "spec": {"containers": [{"name": "x", "image": "busybox"}]},
    }

    _refused(lambda: core.list_secret_for_all_namespaces())
    _refused(lambda: core.list_pod_for_all_namespaces())
    _refused(lambda: core.list_namespaced_secret("kube-system"))
    _refused(lambda: core.read_namespaced_secret("anything", "starverse-system"))
    _refused(lambda: core.create_namespaced_pod("default", pod))
    _refused(lambda: core.delete_namespace("kube-system"))
    escalation = _refused(
        lambda: rbac.create_namespaced_role_binding(
            namespace,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "root", "namespace": namespace},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": "starverse-worker", "namespace": "x"}
                ],
            },
        )
    )
    assert "not currently held" in escalation["message"]
    _refused(
        lambda: rbac.create_cluster_role_binding(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "tenant-everywhere"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "starverse-tenant",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "x", "namespace": "x"}],
            }
        )
    )
    # inside the tenant namespace, through its binding, the same calls are allowed
    assert core.list_namespaced_secret(namespace).items == []
    assert core.create_namespaced_pod(namespace, pod).metadata.namespace == namespace


def _output(session: kube.ExecSession) -> bytes:
    output = b""
    while (chunk := session.receive()) is not None:
        output += chunk
    session.close()
    return output


def test_the_terminal_may_only_open_shells_in_tenant_pods(as_worker, db, settings, tmp_path):
    user = make_user()
    fund(user, 1_000_000)
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    instance, _ = instance_order(user=user, offering_id=offering.id, image_id="pytorch-2.1")
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    namespace, name = instance.k8s_namespace, instance.k8s_name
    # the worker may exec (a cluster's pre-flight check, kube.exec_run), but opens no terminal
    # sessions: exec_open is refused to it only by its own code, not by RBAC
    # the terminal service: its own token, and KUBE_ACCESS=exec
    terminal = as_worker.write_kubeconfig(tmp_path / "terminal", token="terminal-token")
    settings.KUBECONFIG = str(terminal)
    settings.KUBE_ACCESS = "exec"
    kube._api_client.cache_clear()

    shell = kube.exec_open(namespace, name, container="main", command=["nvidia-smi", "-L"])

    assert _output(shell).startswith(b"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    assert shell.exit_code == 0
    with pytest.raises(kube.PermanentKubeError, match="403"):
        kube.exec_open("kube-system", "etcd", container="etcd", command=["sh"])
    with pytest.raises(kube.KubeAccessRefused, match="KUBE_ACCESS=exec"):
        kube.read("Pod", namespace, name)
    # its token, used for anything else, is refused by the cluster as well
    settings.KUBE_ACCESS = True
    core = kube.core()
    assert core.read_namespaced_pod(name, namespace).metadata.name == name
    _refused(lambda: core.list_namespaced_pod(namespace))
    _refused(lambda: core.read_namespaced_secret(f"{name}-access", namespace))
    _refused(lambda: core.delete_namespaced_pod(name, namespace))
    _refused(lambda: core.read_namespaced_pod_log(name, namespace))
    _refused(lambda: core.list_namespace())
    assert as_worker.exec_sessions == []


def test_an_rbac_refusal_is_retried_and_names_the_manifest(as_worker, db, caplog):
    with pytest.raises(kube.RetryableKubeError, match="403"):
        kube.read("Secret", "kube-system", "anything")

    assert _forbidden_logged(caplog) == [
        'kube.forbidden op=Secret.read message=secrets "anything" is forbidden: User '
        f'"{WORKER}" cannot get resource "secrets" in API group "" in the namespace '
        '"kube-system": see the worker\'s RBAC in deploy/k8s/platform.yaml'
    ]
