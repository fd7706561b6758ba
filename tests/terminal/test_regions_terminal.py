"""The web terminal of an instance in another region opens its shell through that region's
cluster: the exec session is on the second emulator's API server, none on the first's."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.kube import KubeEmulator
from fleet.services import region_register
from fleet.tasks import sync_nodes_from_cluster
from instances.lifecycle import instance_order
from instances.provisioning import converge
from tests.conftest import KUBE_TIMINGS
from tests.factories import converge_until, fund, make_user
from tests.terminal.test_terminal import _cookie, _open


@pytest.fixture(scope="module")
def emulator_b() -> Iterator[KubeEmulator]:
    emulator = KubeEmulator(fleet={"h100": 1}, node_prefix="b-", **KUBE_TIMINGS).start()
    yield emulator
    emulator.stop()


def test_a_shell_in_region_b_runs_through_region_bs_cluster(
    transactional_db, catalog, cluster, emulator_b, terminal_service, settings, tmp_path: Path
):
    emulator_b.reset()
    kubeconfig_b = str(emulator_b.write_kubeconfig(tmp_path / "kubeconfig-b"))
    region_register(name="cn-north-1", display_name="华北 1", kubeconfig=kubeconfig_b)
    sync_nodes_from_cluster()
    user = make_user()
    fund(user, 100_000)
    instance, _ = instance_order(
        user=user, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1", region="cn-north-1"
    )
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    settings.KUBE_ACCESS = "exec"  # what the terminal service runs with

    with _open(terminal_service, instance.id, _cookie(user)) as browser:
        assert browser.until("# ").endswith(f"root@{instance.k8s_name}:~# ")
        [session] = emulator_b.exec_sessions
        assert (session.namespace, session.pod) == (instance.k8s_namespace, instance.k8s_name)
        assert cluster.exec_sessions == []
        browser.type("exit\r")
        assert browser.closed() == 1000
