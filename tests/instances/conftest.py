import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command

from billing.choices import TransactionKind
from billing.services import ledger_post
from instances.fleet import nodes_sync_from_cluster
from instances.kube_emulator import KubeEmulator
from instances.models import Image, Offering
from instances.provisioning import converge, kube


@pytest.fixture
def cluster(tmp_path: Any, settings: Any) -> Iterator[KubeEmulator]:
    """The local Kubernetes emulator with 2×8 H100, 1×8 A100 and 1×8 RTX 4090 nodes, the
    platform pointed at it through a kubeconfig, and the catalog seeded."""
    emulator = KubeEmulator(
        fleet={"h100": 2, "a100": 1, "rtx4090": 1},
        pull_delay_s=0.02,
        start_delay_s=0.02,
        tick_s=0.01,
        pod_termination_s=0.01,
    ).start()
    path = tmp_path / "kubeconfig"
    emulator.write_kubeconfig(str(path))
    settings.KUBECONFIG = str(path)
    kube._api_client.cache_clear()
    yield emulator
    emulator.stop()
    kube._api_client.cache_clear()


@pytest.fixture
def catalog(cluster: KubeEmulator, db: Any) -> dict[str, Any]:
    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    return {
        "h100x1": Offering.objects.get(name="1× H100 80GB SXM"),
        "h100x8": Offering.objects.get(name="8× H100 80GB SXM"),
        "h100_node": Offering.objects.get(name="8× H100 80GB SXM bare metal"),
        "a100_node": Offering.objects.get(name="8× A100 80GB SXM bare metal"),
        "image": Image.objects.get(pk="pytorch-2.1"),
    }


def fund(user: Any, fen: int) -> None:
    ledger_post(
        wallet_id=user.tenant.wallet.id,
        key=f"topup:test:{user.id}:{fen}",
        kind=TransactionKind.TOPUP,
        amount_fen=fen,
        description="Top-up",
    )


def converge_until(step: Callable[[str], str], instance_id: str, timeout: float = 10.0) -> str:
    """Run a converge step the way the retrying task does, until it stops asking to wait."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return step(instance_id)
        except converge.StillPending:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
