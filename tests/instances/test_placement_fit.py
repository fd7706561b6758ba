"""Placement the kubelet agrees with: a node fits an instance only when its allocatable CPU,
memory, ephemeral storage and pod slots (capacity less the kubelet's reservations) still have
room for the instance's pod, next to its GPUs, so nothing the database placed is refused by the
kubelet (OutOfcpu) and every offering of the seeded catalog fits the seeded fleet."""

import pytest

from compute.models import Offering
from fleet.models import Node
from instances.admin import OfferingForm
from instances.management.commands.seed_catalog import GPU_MODELS, PRICING
from instances.models import Instance
from instances.provisioning import converge
from tests.factories import converge_until, fund, make_user

SEEDED = [f"{count}× {name}" for _key, name, *_rest in GPU_MODELS for count in (1, 2, 4, 8)] + [
    f"8× {name} bare metal" for key, name, *_rest in GPU_MODELS if PRICING[key][1]
]


@pytest.fixture
def renter(catalog, client_for, settings):
    # One account fills the fleet here: the account limits have their own tests (test_queue.py).
    settings.MAX_RUNNING_GPUS = 100
    user = make_user()
    fund(user, 10_000_000)
    return client_for(user)


def _available(client, offering):
    response = client.get("/api/v1/offerings")
    assert response.status_code == 200
    rows = response.json()
    rows = rows["results"] if isinstance(rows, dict) else rows
    return next(row["available"] for row in rows if row["id"] == offering.id)


def _order(client, offering, image):
    response = client.post(
        "/api/v1/instances", {"offering": offering.id, "image": image.id}, format="json"
    )
    assert response.status_code == 202, response.json()
    return Instance.objects.get(pk=response.json()["id"])


def test_the_emulated_nodes_report_allocatable_below_capacity_and_sync_reads_it(catalog):
    node = Node.objects.get(name="gpu-rtx4090-0")
    assert node.cpu_cores == 64
    assert node.allocatable_cpu_m == 62_000
    assert node.allocatable_memory_mib == (512 - 16) * 1024
    assert node.allocatable_ephemeral_mib == (3500 - 100) * 1024
    assert node.allocatable_pods == 110
    h100 = Node.objects.get(name="gpu-h100-0")
    assert h100.allocatable_cpu_m == 190_000


@pytest.mark.parametrize("name", SEEDED)
def test_every_seeded_offering_runs_until_none_is_available(name, renter, catalog):
    offering = Offering.objects.get(name=name)
    image = catalog["image"]
    first = _available(renter, offering)
    assert first > 0, f"{name} fits nowhere on the seeded fleet"
    ordered = []
    while _available(renter, offering) > 0:
        ordered.append(_order(renter, offering, image))
        assert len(ordered) <= first
    assert len(ordered) == first
    for instance in ordered:
        assert instance.status == "provisioning"
        reached = converge_until(converge.provision, instance.id)
        assert reached == "running", f"{name} #{ordered.index(instance)}: {reached}"
    queued = _order(renter, offering, image)
    assert queued.status == "queued"


def test_six_twelve_core_rtx4090_orders_run_five_and_queue_one_never_out_of_cpu(renter, catalog):
    """The old seeded 1× RTX 4090 (12 cores a GPU): five fit the node's 62 allocatable cores.
    Counting GPUs only placed all six and the kubelet refused the sixth (OutOfcpu)."""
    offering = Offering.objects.get(name="1× RTX 4090 24GB")
    offering.cpu_cores = 12
    offering.save()
    assert _available(renter, offering) == 5
    ordered = [_order(renter, offering, catalog["image"]) for _ in range(6)]
    assert [i.status for i in ordered] == ["provisioning"] * 5 + ["queued"]
    for instance in ordered[:5]:
        assert converge_until(converge.provision, instance.id) == "running"
    assert _available(renter, offering) == 0


def _form(offering, **changes):
    data = {
        "name": offering.name,
        "kind": offering.kind,
        "gpu_model": offering.gpu_model_id,
        "gpu_count": offering.gpu_count,
        "cpu_cores": offering.cpu_cores,
        "memory_gb": offering.memory_gb,
        "local_disk_gb": offering.local_disk_gb,
        "price_per_hour_fen": offering.price_per_hour_fen,
        "price_per_month_fen": offering.price_per_month_fen or "",
        "active": offering.active,
        "sort": offering.sort,
        "system_disk_gb": offering.system_disk_gb,
        "cpu_only_price_per_hour_fen": offering.cpu_only_price_per_hour_fen or "",
        "spot_price_per_hour_fen": offering.spot_price_per_hour_fen or "",
        **changes,
    }
    return OfferingForm(data=data, instance=offering)


def test_the_admin_refuses_an_offering_that_fits_on_no_node(catalog):
    offering = Offering.objects.get(name="8× RTX 4090 24GB")
    assert _form(offering).is_valid()
    too_many_cores = _form(offering, cpu_cores=96)
    assert not too_many_cores.is_valid()
    message = " ".join(too_many_cores.non_field_errors())
    assert "34 CPU cores" in message and "allocatable 62" in message
    too_much_memory = _form(offering, memory_gb=512)
    assert not too_much_memory.is_valid()
    assert "16 GiB of memory" in " ".join(too_much_memory.non_field_errors())
    too_many_gpus = _form(offering, gpu_count=9)
    assert not too_many_gpus.is_valid()
