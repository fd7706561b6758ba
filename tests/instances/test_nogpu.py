"""No-GPU mode (issue 28): a stopped instance started with `{"gpus": 0}` runs with its disks
and no GPU on a node with room for its CPU and memory (a CPU-only node first, else a GPU node's
spare CPU), billed at the offering's cpu_only_price_per_hour_fen (10 fen an hour seeded) from
cash or trial credit; what it wrote on its disk is there when a normal start brings its GPUs
back. A monthly rental keeps its GPUs reserved and pays nothing more; another tenant's
instance is a 404."""

import io
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from billing.models import LedgerTransaction, Wallet
from billing.services import minute_charge_fen
from compute.models import Allocation, Holding
from compute.selectors import capacity_by_model
from devstack.kube import DEFAULT_FLEET, KubeEmulator
from devstack.kube.resources import PODS
from fleet.models import Node
from instances.lifecycle import instance_order, instance_restart, instance_start, instance_stop
from instances.metering import metering_tick
from instances.models import Instance
from instances.provisioning import converge
from starverse.core import kube
from tests.conftest import KUBE_TIMINGS
from tests.e2e.steps import platform_on
from tests.factories import converge_until, fund, make_instance, make_user

NO_GPU_FEN = 10  # the seeded ¥0.10 an hour


@pytest.fixture
def mixed_fleet(settings, tmp_path, db) -> Iterator[KubeEmulator]:
    """The platform on an emulated cluster of one 8×H100 node and two CPU-only nodes."""
    emulator = KubeEmulator(fleet={"h100": 1, "cpu": 2}, **KUBE_TIMINGS).start()
    with platform_on(emulator, settings, tmp_path):
        yield emulator


def _start(client, instance, **body):
    return client.post(f"/api/v1/instances/{instance.id}/start", body, format="json")


def _pod(instance):
    instance.refresh_from_db()
    return kube.read("Pod", instance.k8s_namespace, instance.k8s_name)


def _disk_file(emu: KubeEmulator, instance: Instance, path: str) -> Path:
    """Where `path` in the instance's running container lives on the emulated disk."""
    instance.refresh_from_db()
    stored = emu.api.get_raw(PODS, instance.k8s_namespace, instance.k8s_name)
    place = emu.volume_data.resolve(stored, stored["spec"]["containers"][0], path)
    assert place is not None, f"{path} is on no volume"
    return Path(place.path)


def _money(user):
    wallet = Wallet.objects.get(tenant=user.tenant)
    return (wallet.cash_fen, wallet.promo_fen, wallet.pending_cash_fen, wallet.pending_promo_fen)


def _stopped(instance):
    instance_stop(instance_id=instance.id)
    assert converge_until(converge.stop, instance.id) == "stopped"
    instance.refresh_from_db()


def test_a_stopped_instance_runs_without_gpus_on_a_cpu_node_at_ten_fen_an_hour(
    mixed_fleet, client_for
):
    user = make_user()
    instance = make_instance(user, "stopped")
    fund(user, 10_000, key="more")
    client = client_for(user)

    answer = _start(client, instance, gpus=0)
    assert answer.status_code == 202, answer.json()
    assert (answer.json()["status"], answer.json()["gpus_attached"]) == ("provisioning", False)
    assert answer.json()["cpu_only_price_per_hour_fen"] == NO_GPU_FEN
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    assert instance.node is not None and instance.node.gpu_count == 0  # a CPU-only node
    assert not Allocation.objects.filter(holding_id=instance.id).exists()
    container = _pod(instance)["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in container["env"]
    assert client.get(f"/api/v1/instances/{instance.id}").json()["gpus_attached"] is False

    # what `pip install` left on the disk
    installed = _disk_file(mixed_fleet, instance, "/root/data/venv/installed.txt")
    installed.parent.mkdir(parents=True, exist_ok=True)
    installed.write_text("torch==2.1\n")

    # an hour without GPUs: 10 fen, posted as one line of no-GPU usage
    metering_tick(now=instance.running_since + timedelta(minutes=60, seconds=1))
    [hour] = LedgerTransaction.objects.filter(instance_id=instance.id, kind="usage").exclude(
        description="GPU usage"
    )
    assert (hour.minutes, -hour.amount_fen) == (60, NO_GPU_FEN)
    assert hour.description == "No-GPU mode usage"
    assert -hour.amount_fen == sum(minute_charge_fen(NO_GPU_FEN, m) for m in range(1, 61))

    # a normal start brings the GPU back, and the disk with it
    _stopped(instance)
    assert Holding.objects.get(pk=instance.id).cpu_node_id is None
    answer = _start(client, instance)
    assert answer.status_code == 202, answer.json()
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    assert instance.node.gpu_count == 8
    assert Allocation.objects.filter(holding_id=instance.id).count() == 1
    container = _pod(instance)["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "NVIDIA_VISIBLE_DEVICES" not in {item["name"] for item in container["env"]}
    assert client.get(f"/api/v1/instances/{instance.id}").json()["gpus_attached"] is True
    again = _disk_file(mixed_fleet, instance, "/root/data/venv/installed.txt")
    assert again.read_text() == "torch==2.1\n"


def test_without_a_cpu_node_it_takes_a_gpu_nodes_spare_cpu_and_no_gpu(catalog, client_for):
    user = make_user()
    instance = make_instance(user, "stopped")
    fund(user, 10_000, key="more")
    before = Allocation.objects.count()

    assert _start(client_for(user), instance, gpus=0).status_code == 202
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    assert instance.node.gpu_count > 0  # the session's fleet has GPU nodes only
    assert Allocation.objects.count() == before  # it took no GPU
    assert "nvidia.com/gpu" not in _pod(instance)["spec"]["containers"][0]["resources"]["limits"]
    # and a GPU order still finds every GPU free
    assert make_instance(make_user(), "running").node is not None


def test_trial_credit_pays_for_no_gpu_mode(mixed_fleet, client_for):
    user = make_user()  # ¥10 of trial credit
    instance = make_instance(user, "stopped")  # its cash: one hour, less the minute it ran
    client = client_for(user)
    wallet = Wallet.objects.get(tenant=user.tenant)
    assert wallet.cash_fen < instance.offering.price_per_hour_fen

    refused = _start(client, instance)  # 1× H100 has no trial price: cash only, too little
    assert (refused.status_code, refused.json()["code"]) == (402, "insufficient_balance")
    answer = _start(client, instance, gpus=0)
    assert answer.status_code == 202, answer.json()
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()

    metering_tick(now=instance.running_since + timedelta(minutes=60, seconds=1))
    [hour] = LedgerTransaction.objects.filter(
        instance_id=instance.id, kind="usage", description="No-GPU mode usage"
    )
    assert (hour.price_kind, hour.promo_delta_fen, hour.cash_delta_fen) == ("trial", -10, 0)


def test_another_tenants_instance_is_a_404_and_bad_counts_a_400(mixed_fleet, client_for):
    owner = make_user()
    instance = make_instance(owner, "stopped")
    stranger = client_for(make_user())
    assert _start(stranger, instance, gpus=0).status_code == 404

    bad = _start(client_for(owner), instance, gpus=3)
    assert bad.status_code == 400 and "gpus" in str(bad.json())
    assert Instance.objects.get(pk=instance.pk).status == "stopped"


def test_not_offered_or_no_room_is_a_409_that_says_what_to_do(mixed_fleet, client_for):
    user = make_user()
    instance = make_instance(user, "stopped")
    fund(user, 10_000, key="more")
    client = client_for(user)
    offering = instance.offering

    offering.cpu_only_price_per_hour_fen = None
    offering.save()
    refused = _start(client, instance, gpus=0)
    assert (refused.status_code, refused.json()["code"]) == (409, "no_gpu_mode_unavailable")
    assert "with its GPUs" in refused.json()["detail"]

    offering.cpu_only_price_per_hour_fen = NO_GPU_FEN
    offering.cpu_cores = 10_000  # more than any node has
    offering.save()
    refused = _start(client, instance, gpus=0)
    assert (refused.status_code, refused.json()["code"]) == (409, "no_capacity")
    assert Instance.objects.get(pk=instance.pk).status == "stopped"


def test_a_monthly_rental_keeps_its_gpus_and_pays_nothing_more(catalog, client_for, settings):
    settings.MAX_RUNNING_GPUS = 32
    user = make_user()
    node_offering = catalog["h100_node"]
    fund(user, node_offering.price_per_month_fen + 10_000)
    instance, _ = instance_order(
        user=user, offering_id=node_offering.id, image_id="pytorch-2.1", billing="monthly"
    )
    assert converge_until(converge.provision, instance.id) == "running"
    _stopped(instance)
    node = instance.node
    wallet_before = _money(user)
    client = client_for(user)

    answer = _start(client, instance, gpus=0)
    assert answer.status_code == 202, answer.json()
    assert answer.json()["gpus_attached"] is False
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    assert instance.node == node  # on its reserved node
    assert Allocation.objects.filter(holding_id=instance.id).count() == 8  # still reserved
    assert "nvidia.com/gpu" not in _pod(instance)["spec"]["containers"][0]["resources"]["limits"]
    assert instance.running_since is not None
    metering_tick(now=instance.running_since + timedelta(minutes=90))
    assert _money(user) == wallet_before
    assert not LedgerTransaction.objects.filter(instance_id=instance.id, kind="usage").exclude(
        idempotency_key__startswith="monthly:"
    )

    _stopped(instance)
    assert _start(client, instance).json()["gpus_attached"] is True
    assert converge_until(converge.provision, instance.id) == "running"
    assert _pod(instance)["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_cpu_only_nodes_are_mirrored_without_a_product_or_an_agent(mixed_fleet, tmp_path):
    cpu = list(Node.objects.filter(gpu_count=0).order_by("name"))
    assert [(node.name, node.gpu_product, node.state) for node in cpu] == [
        ("cpu-0", "", "ready"),
        ("cpu-1", "", "ready"),
    ]
    assert [row["gpu_product"] for row in capacity_by_model()] == ["NVIDIA H100 80GB HBM3"]
    call_command("fleet_sync", agent_tokens=str(tmp_path / "agents"), stdout=io.StringIO())
    assert sorted(path.name for path in (tmp_path / "agents").iterdir()) == ["gpu-h100-0.token"]
    assert DEFAULT_FLEET["cpu"] == 2  # the emulator's default fleet has two


def test_a_restart_to_change_disks_keeps_no_gpu_mode(catalog):
    user = make_user()
    instance = make_instance(user, "stopped")
    fund(user, 10_000, key="more")
    instance_start(instance_id=instance.id, gpus_attached=False)
    assert converge_until(converge.provision, instance.id) == "running"
    _stopped(instance)

    instance_restart(instance_id=instance.id)  # as a disk attached with restart does

    holding = Holding.objects.get(pk=instance.id)
    assert (holding.gpus_attached, holding.cpu_node_id is not None) == (False, True)
    assert not Allocation.objects.filter(holding_id=instance.id).exists()


def test_the_console_offers_and_runs_a_start_without_gpu(catalog, client):
    user = make_user()
    instance = make_instance(user, "stopped")
    fund(user, 10_000, key="more")
    client.force_login(user)
    detail = reverse("instances:detail", args=[instance.id])

    page = client.get(detail).content.decode()
    assert "Start without GPU" in page and 'name="gpus" value="0"' in page

    client.post(reverse("instances:start", args=[instance.id]), {"gpus": "0", "next": detail})
    assert Holding.objects.get(pk=instance.id).gpus_attached is False
    assert Instance.objects.get(pk=instance.id).status == "provisioning"
    assert converge_until(converge.provision, instance.id) == "running"
    assert "No-GPU mode: running without its GPUs" in client.get(detail).content.decode()
