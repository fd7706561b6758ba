"""order_to_running_cold_p50: what the image pull costs a user, and what placement that knows
the nodes' images plus pre-pull saves.

The kube emulator runs a fleet of 20 H100 nodes with realistic image sizes (the catalogue's:
PyTorch 18 GB) pulled at 800 MB/s a node, so a cold start waits 22.5 s for its image; 2 nodes
(10 %) hold the image before anything else happens. 50 one-GPU orders arrive one every 0.2 s,
each driven to Running as the provisioning task does, twice in the same run:

- blind: placement knows nothing of the images (no node sync of them, no pre-pull), as before
  this change: the orders land by best fit and mostly pull;
- cache-aware: the node sync has read the nodes' images and the pre-pull DaemonSet of the
  catalogue's pre-pull image has done its work (its steady state: it runs when the catalogue
  changes, long before orders), so the orders go to nodes that hold the image.

Printed: the p50 from order to Running of the cache-aware run next to the blind one's (goal:
ratio <= 0.2)."""

import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import recreate_database, report, setup_django

if TYPE_CHECKING:
    from devstack.kube import KubeEmulator
from bench.instances import _users

NODES = 20
ORDERS = 50
ARRIVAL_S = 0.2
PULL_MBPS = 800.0


def order_to_running_cold() -> dict:
    from django.core.management import call_command
    from django.db import connections
    from django.test import override_settings

    from compute.models import Image, Offering
    from devstack.kube import KubeEmulator
    from fleet.models import Node, NodeImage
    from fleet.services import nodes_sync_from_cluster
    from instances.lifecycle import instance_order
    from instances.provisioning import converge, prepull
    from starverse.core import kube

    call_command("seed_catalog", verbosity=0)
    image = Image.objects.get(pk="pytorch-2.1")
    emulator = KubeEmulator(
        fleet={"h100": NODES},
        pull_delay_s=0.0,
        start_delay_s=0.0,
        tick_s=0.05,  # the emulator's default: its passes over 120 pods share the 2 cores
        image_sizes={
            image.container_image: image.size_bytes,
            "registry.k8s.io/pause:3.9": prepull.PAUSE_IMAGE_BYTES,
        },
        default_image_bytes=15_000_000_000,
        pull_bandwidth_mbps=PULL_MBPS,
    ).start()
    kubeconfig = Path(tempfile.mkdtemp()) / "kubeconfig"
    emulator.write_kubeconfig(str(kubeconfig))
    try:
        with override_settings(KUBECONFIG=str(kubeconfig), CELERY_TASK_ALWAYS_EAGER=False):
            kube._api_client.cache_clear()
            for index in range(NODES - NODES // 10, NODES):  # 10 % warm, the last by name
                emulator.preload_image(f"gpu-h100-{index}", image.container_image)
            nodes_sync_from_cluster()
            offering = Offering.objects.get(name="1× H100 80GB SXM")

            def run(prefix: str) -> list[float]:
                users = _users(ORDERS, prefix=prefix)

                def one(index: int) -> float:
                    time.sleep(index * ARRIVAL_S)
                    try:
                        began = time.perf_counter()
                        instance, _ = instance_order(
                            user=users[index], offering_id=offering.id, image_id=image.id
                        )
                        while True:  # what the provisioning task does while the pod starts
                            try:
                                if converge.provision(instance.id) == "running":
                                    return time.perf_counter() - began
                            except converge.StillPending:
                                time.sleep(0.1)
                    finally:
                        connections.close_all()

                with ThreadPoolExecutor(max_workers=ORDERS) as pool:
                    return sorted(pool.map(one, range(ORDERS)))

            NodeImage.objects.all().delete()  # blind: placement as if it knew no images
            blind = run("cb")

            prepull.prepull_converge()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # the pre-pull's work done, the sync has seen it
                nodes_sync_from_cluster()
                held = NodeImage.objects.filter(name=kube.image_name(image.container_image))
                if held.count() == Node.objects.count():
                    break
                time.sleep(0.5)
            aware = run("cw")
    finally:
        emulator.stop()
        kube._api_client.cache_clear()
    return report(
        "order_to_running_cold_p50",
        statistics.median(aware),
        "s",
        statistics.median(blind),
        f"the same {ORDERS} orders with placement blind to images and no pre-pull "
        f"(18 GB at {PULL_MBPS:g} MB/s, 10 % of nodes warm), same run, p50",
        "ratio <= 0.2",
    )


SAVED_BYTES = 10_000_000_000
REGISTRY_MBPS = 1000.0


def _copy_once_s(emulator: "KubeEmulator") -> float:
    """The baseline: the same bytes copied once over the same modelled link, as a plain pod
    on a node that pulls a 10 GB image at the registry's bandwidth."""
    reference = "bench.local/copy-once:10gb"
    emulator.set_image_size(reference, SAVED_BYTES)
    from starverse.core import kube

    began = time.perf_counter()
    kube.ensure(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "copy-once", "namespace": "default"},
            "spec": {
                "nodeName": "gpu-h100-1",
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
                "containers": [{"name": "c", "image": reference}],
            },
        },
    )
    while (kube.read("Pod", "default", "copy-once") or {}).get("status", {}).get("phase") != (
        "Running"
    ):
        time.sleep(0.1)
    return time.perf_counter() - began


def save_image_10gb() -> dict:
    """save_image_10gb: seconds from `POST /instances/{id}/image` to the image ready, for a
    stopped instance whose system disk changed by 10 GB (one sparse file: the emulator copies
    its holes for free), on the kube emulator with the registry modelled at REGISTRY_MBPS;
    against copying the same 10 GB once over the same link (a pull of a 10 GB image), in the
    same run. The save pushes only the changed bytes, so its goal is ratio <= 1.2."""
    import os

    from django.core.management import call_command
    from django.test import override_settings

    from devstack.kube import KubeEmulator
    from fleet.services import nodes_sync_from_cluster
    from instances.images import image_save
    from instances.lifecycle import instance_order, instance_stop
    from instances.models import Instance
    from instances.provisioning import converge, saving
    from starverse.core import kube

    call_command("seed_catalog", verbosity=0)
    emulator = KubeEmulator(
        fleet={"h100": 2},
        pull_delay_s=0.0,
        start_delay_s=0.0,
        pull_bandwidth_mbps=REGISTRY_MBPS,
        registry_bandwidth_mbps=REGISTRY_MBPS,
    ).start()
    kubeconfig = Path(tempfile.mkdtemp()) / "kubeconfig"
    emulator.write_kubeconfig(str(kubeconfig))
    try:
        with override_settings(KUBECONFIG=str(kubeconfig), CELERY_TASK_ALWAYS_EAGER=False):
            kube._api_client.cache_clear()
            nodes_sync_from_cluster()
            [user] = _users(1, prefix="si")
            instance, _ = instance_order(
                user=user, offering_id=_offering_id(), image_id="pytorch-2.1"
            )
            _until(lambda: converge.provision(instance.id) == "running", converge.StillPending)
            instance.refresh_from_db()
            pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
            assert pod is not None
            place = emulator.volume_data.resolve(
                pod, pod["spec"]["containers"][0], "/usr/local/share/changed.bin"
            )
            assert place is not None
            place.path.parent.mkdir(parents=True, exist_ok=True)
            with open(place.path, "wb") as changed:
                os.truncate(changed.fileno(), SAVED_BYTES)
            instance_stop(instance_id=instance.id, by_owner=True)
            _until(lambda: converge.stop(instance.id) == "stopped", converge.StillPending)

            began = time.perf_counter()
            image = image_save(
                user=user, instance=Instance.objects.get(pk=instance.id), name="ten-gb"
            ).image
            _until(lambda: _saved(image.id), saving.StillSaving)
            saved_s = time.perf_counter() - began
            assert emulator.images.layers[image.container_image][-1] == SAVED_BYTES
            baseline_s = _copy_once_s(emulator)
    finally:
        emulator.stop()
        kube._api_client.cache_clear()
    return report(
        "save_image_10gb",
        saved_s,
        "s",
        baseline_s,
        f"copying the same 10 GB once at {REGISTRY_MBPS:g} MB/s (a pull of a 10 GB image), "
        "same run",
        "ratio <= 1.2",
    )


def _offering_id() -> str:
    from compute.models import Offering

    return Offering.objects.get(name="1× H100 80GB SXM").id


def _saved(image_id: str) -> bool:
    from instances.provisioning import saving

    saving.image_save_converge(image_id)  # raises StillSaving until the build pod ends
    return True


def _until(done: "Callable[[], bool]", pending: type[Exception], timeout_s: float = 300.0) -> None:
    """Run a converge step as its retrying task does (every 0.1 s) until it is done."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if done():
                return
        except pending:
            pass
        time.sleep(0.1)
    raise TimeoutError("the step did not finish")


def run() -> list[dict]:
    recreate_database()
    setup_django()
    return [order_to_running_cold()]


def run_save_image() -> list[dict]:
    recreate_database()
    setup_django()
    return [save_image_10gb()]


# --- clone_to_running --------------------------------------------------------------------------

CLONES = 10
SNAPSHOT_READY_S = 2.0  # a CSI snapshot's modelled time to be ready to restore from


def clone_to_running() -> dict:
    """Seconds from POST /instances/{id}/clone (the service it calls) to the clone running,
    against a plain order of the same offering and image to running, same emulator, same run:
    CLONES running sources, each cloned once and matched by one plain order, one after the
    other, the medians printed. The clone's extra is its two snapshots (SNAPSHOT_READY_S each,
    taken together) and their restore."""
    from django.core.management import call_command
    from django.test import override_settings

    from compute.models import Offering
    from devstack.kube import KubeEmulator
    from fleet.services import nodes_sync_from_cluster
    from instances.clones import instance_clone
    from instances.lifecycle import instance_order
    from instances.models import Instance
    from instances.provisioning import converge
    from starverse.core import kube

    def until_running(instance_id: str, began: float) -> float:
        while True:  # what the provisioning task does while the pod starts
            try:
                if converge.provision(instance_id) == "running":
                    return time.perf_counter() - began
            except converge.StillPending:
                time.sleep(0.05)

    call_command("seed_catalog", verbosity=0)
    emulator = KubeEmulator(
        fleet={"h100": 3 * CLONES},
        pull_delay_s=0.0,
        start_delay_s=0.0,
        tick_s=0.05,
        snapshot_ready_s=SNAPSHOT_READY_S,
    ).start()
    kubeconfig = Path(tempfile.mkdtemp()) / "kubeconfig"
    emulator.write_kubeconfig(str(kubeconfig))
    clones: list[float] = []
    plain: list[float] = []
    try:
        with override_settings(KUBECONFIG=str(kubeconfig), CELERY_TASK_ALWAYS_EAGER=False):
            kube._api_client.cache_clear()
            nodes_sync_from_cluster()
            offering = Offering.objects.get(name="1× H100 80GB SXM")
            for user in _users(CLONES, prefix="cl"):
                source, _ = instance_order(
                    user=user, offering_id=offering.id, image_id="pytorch-2.1"
                )
                until_running(source.id, time.perf_counter())
                began = time.perf_counter()
                clone, _ = instance_clone(user=user, source=Instance.objects.get(pk=source.id))
                clones.append(until_running(clone.id, began))
                began = time.perf_counter()
                order, _ = instance_order(
                    user=user, offering_id=offering.id, image_id="pytorch-2.1"
                )
                plain.append(until_running(order.id, began))
    finally:
        emulator.stop()
        kube._api_client.cache_clear()
    return report(
        "clone_to_running",
        statistics.median(clones),
        "s",
        statistics.median(plain),
        f"a plain order of the same offering to running, same emulator (snapshots ready after "
        f"{SNAPSHOT_READY_S:g} s), same run, p50 of {CLONES}",
        f"value <= baseline + {SNAPSHOT_READY_S:g} + 1",
    )


def clone_to_running_fresh() -> dict:
    """`python -m bench clone_to_running`: the clone bench alone, on a fresh database."""
    recreate_database()
    setup_django()
    return clone_to_running()
