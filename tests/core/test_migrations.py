"""Moving models between apps keeps their tables and rows: a database made by the layout before
the fleet, storage and compute apps existed (everything in instances, the NAS in datasets)
migrates forward with its data, and permissions follow the models."""

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.migration_graph import migrated_apps

# The leaf migrations of the layout before the split.
BEFORE = [
    ("instances", "0007_cloud_disks"),
    ("datasets", "0001_initial"),
    ("fleet", None),
    ("compute", None),
    ("storage", None),
    ("clusters", None),
    ("endpoints", None),
]


def _migrate(targets: Sequence[tuple[str, str | None]]) -> Any:
    """Migrate to `targets` (None: no migration of that app) and return the models as they
    are there."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return migrated_apps(executor)


def _latest() -> list[tuple[str, str]]:
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()


def _seed_old_layout(old: Any) -> dict[str, str]:
    """Rows in every moved model, written through the old layout's models."""
    tenant = old.get_model("accounts", "Tenant").objects.create(id="tnt_migrate1", name="lab")
    user = old.get_model("accounts", "User").objects.create(
        id="usr_migrate1", email="lab@example.edu.cn", tenant=tenant
    )
    gpu_model = old.get_model("instances", "GpuModel").objects.create(
        id="h100", name="H100", product="NVIDIA H100 80GB HBM3", memory_gb=80, interconnect="nvlink"
    )
    node = old.get_model("instances", "Node").objects.create(
        id="node_migrate1",
        name="gpu-a-01",
        gpu_product=gpu_model.product,
        gpu_count=8,
        gpu_memory_mb=81559,
    )
    old.get_model("instances", "Gpu").objects.create(
        node=node, index=0, uuid="GPU-0", product=gpu_model.product
    )
    offering = old.get_model("instances", "Offering").objects.create(
        id="off_migrate1",
        name="1× H100",
        kind="cloud",
        gpu_model=gpu_model,
        gpu_count=1,
        cpu_cores=24,
        memory_gb=200,
        local_disk_gb=50,
        price_per_hour_fen=2_000,
    )
    image = old.get_model("instances", "Image").objects.create(
        id="pytorch", name="PyTorch", description="", container_image="pytorch:2.1"
    )
    instance = old.get_model("instances", "Instance").objects.create(
        id="ins_migrate1",
        tenant=tenant,
        created_by=user,
        name="train",
        offering=offering,
        image=image,
        status="running",
        node=node,
    )
    old.get_model("instances", "Allocation").objects.create(
        node=node, gpu_index=0, instance=instance
    )
    old.get_model("instances", "Disk").objects.create(
        id="dsk_migrate1",
        tenant=tenant,
        name="ckpt",
        size_gb=100,
        status="attached",
        instance=instance,
    )
    old.get_model("instances", "StoragePrice").objects.create(kind="disk", price_per_gb_day_fen=3)
    old.get_model("datasets", "SharedStorage").objects.create(
        id="nas_migrate1", tenant=tenant, size_gb=500, k8s_name="nas-x"
    )
    content_type = old.get_model("contenttypes", "ContentType")
    node_type, _ = content_type.objects.get_or_create(app_label="instances", model="node")
    permission = old.get_model("auth", "Permission").objects.get_or_create(
        content_type=node_type, codename="change_node", defaults={"name": "Can change node"}
    )[0]
    offering_type, _ = content_type.objects.get_or_create(app_label="instances", model="offering")
    catalog = old.get_model("auth", "Permission").objects.get_or_create(
        content_type=offering_type,
        codename="change_offering",
        defaults={"name": "Can change offering"},
    )[0]
    return {"permission": str(permission.pk), "catalog_permission": str(catalog.pk)}


def test_a_database_of_the_old_layout_migrates_forward_with_its_rows(transactional_db):
    latest = _latest()
    old = _migrate(BEFORE)
    seeded = _seed_old_layout(old)

    new = _migrate(latest)

    node = new.get_model("fleet", "Node").objects.get(pk="node_migrate1")
    assert node.name == "gpu-a-01"
    assert new.get_model("fleet", "Gpu").objects.get(node=node, index=0).uuid == "GPU-0"
    assert new.get_model("fleet", "GpuModel").objects.get(pk="h100").memory_gb == 80
    instance = new.get_model("instances", "Instance").objects.get(pk="ins_migrate1")
    assert (instance.node_id, instance.offering.gpu_model_id) == ("node_migrate1", "h100")
    allocation = new.get_model("compute", "Allocation").objects.get(node=node, gpu_index=0)
    assert allocation.holding_id == "ins_migrate1"
    disk = new.get_model("storage", "Disk").objects.get(pk="dsk_migrate1")
    assert (disk.name, disk.instance_id, disk.status) == ("ckpt", "ins_migrate1", "attached")
    assert (
        new.get_model("storage", "StoragePrice").objects.get(kind="disk").price_per_gb_day_fen == 3
    )
    nas = new.get_model("storage", "SharedStorage").objects.get(pk="nas_migrate1")
    assert nas.size_gb == 500
    # Permissions granted on the old models are the new models' permissions.
    permission = new.get_model("auth", "Permission").objects.get(pk=seeded["permission"])
    assert (permission.content_type.app_label, permission.content_type.model) == ("fleet", "node")
    catalog = new.get_model("auth", "Permission").objects.get(pk=seeded["catalog_permission"])
    assert (catalog.content_type.app_label, catalog.content_type.model) == ("compute", "offering")
    assert new.get_model("compute", "Offering").objects.get(pk="off_migrate1").gpu_count == 1
    # Nothing was copied: the tables are the ones the old layout wrote.
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM instances_node")
        assert cursor.fetchone()[0] == 1
        cursor.execute("SELECT COUNT(*) FROM datasets_sharedstorage")
        assert cursor.fetchone()[0] == 1


# The leaf migrations before clusters owned their ranks (Instance.cluster, Instance.rank).
BEFORE_RANKS = [
    ("instances", "0025_metering_moved_to_holdings"),
    ("clusters", "0006_cluster_key_at_order"),
]


def _seed_ranks(old: Any) -> None:
    """A cluster of two ranks and one rank removed by scaling down, and an instance on its
    own, written through the models of the layout before the move, with their holdings."""
    tenant = old.get_model("accounts", "Tenant").objects.create(id="tnt_ranks1", name="lab")
    user = old.get_model("accounts", "User").objects.create(
        id="usr_ranks1", email="ranks@example.edu.cn", tenant=tenant
    )
    gpu_model = old.get_model("fleet", "GpuModel").objects.create(
        id="h100", name="H100", product="NVIDIA H100 80GB HBM3", memory_gb=80, interconnect="nvlink"
    )
    offering = old.get_model("compute", "Offering").objects.create(
        id="off_ranks1",
        name="8× H100",
        kind="bare_metal",
        gpu_model=gpu_model,
        gpu_count=8,
        cpu_cores=192,
        memory_gb=2000,
        local_disk_gb=3000,
        price_per_hour_fen=20_000,
    )
    image = old.get_model("compute", "Image").objects.create(
        id="pytorch", name="PyTorch", description="", container_image="pytorch:2.1"
    )
    cluster = old.get_model("clusters", "Cluster").objects.create(
        id="clu_ranks1",
        tenant=tenant,
        created_by=user,
        name="train",
        offering=offering,
        image=image,
        node_count=2,
    )
    rows = {"ins_rank0": (cluster, 0), "ins_rank1": (cluster, 1), "ins_gone2": (cluster, None)}
    rows["ins_alone"] = (None, None)
    for pk, (owner, rank) in rows.items():
        common = {"tenant": tenant, "created_by": user, "offering": offering}
        gang = owner.pk if owner is not None else ""
        old.get_model("compute", "Holding").objects.create(
            id=pk, kind="rank" if owner else "instance", state="released", gang=gang, **common
        )
        old.get_model("instances", "Instance").objects.create(
            id=pk, name=pk, image=image, status="stopped", cluster=owner, rank=rank, **common
        )


def test_a_clusters_ranks_move_to_the_clusters_table_and_back(transactional_db):
    latest = _latest()
    _seed_ranks(_migrate(BEFORE_RANKS))

    new = _migrate(latest)

    rank = new.get_model("clusters", "Rank")
    found = {row.instance_id: (row.cluster_id, row.index) for row in rank.objects.all()}
    assert found == {
        "ins_rank0": ("clu_ranks1", 0),
        "ins_rank1": ("clu_ranks1", 1),
        "ins_gone2": ("clu_ranks1", None),  # its history stays the cluster's
    }
    gangs = dict(new.get_model("compute", "Holding").objects.values_list("id", "gang"))
    # a removed rank is no longer placed or started with the others
    assert gangs == {
        "ins_rank0": "clu_ranks1",
        "ins_rank1": "clu_ranks1",
        "ins_gone2": "",
        "ins_alone": "",
    }

    old = _migrate(BEFORE_RANKS)
    instances = old.get_model("instances", "Instance").objects
    back = {row.pk: (row.cluster_id, row.rank) for row in instances.all()}
    assert back == {
        "ins_rank0": ("clu_ranks1", 0),
        "ins_rank1": ("clu_ranks1", 1),
        "ins_gone2": ("clu_ranks1", None),
        "ins_alone": (None, None),
    }
    gangs = dict(old.get_model("compute", "Holding").objects.values_list("id", "gang"))
    assert gangs["ins_gone2"] == "clu_ranks1"
    _migrate(latest)


def test_ledger_postings_are_numbered_per_wallet_and_stay_immutable(transactional_db):
    """billing 0012: every transaction made before gets its place in its wallet's ledger, in
    the order they were read until then (created_at, then id), every wallet the count of its
    postings, and the ledger's rows are still refused any change afterwards."""
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    import pytest
    from django.db import DatabaseError, transaction

    latest = _latest()
    old = _migrate([("billing", "0011_usage_pending_and_minutes")])
    at = datetime(2026, 11, 10, 12, 0, tzinfo=ZoneInfo("Asia/Shanghai"))
    made = {}
    for name in ("a", "b"):
        tenant = old.get_model("accounts", "Tenant").objects.create(id=f"tnt_seq{name}", name=name)
        wallet = old.get_model("billing", "Wallet").objects.create(
            id=f"wal_seq{name}", tenant=tenant
        )
        made[wallet.id] = [
            old.get_model("billing", "LedgerTransaction")
            .objects.create(
                id=f"txn_seq{name}{n}",
                wallet=wallet,
                kind="topup",
                idempotency_key=f"seq:{name}:{n}",
                request_hash="",
                amount_fen=100,
                cash_delta_fen=100,
                promo_delta_fen=0,
                cash_after_fen=100 * (n + 1),
                promo_after_fen=0,
                description="Top-up",
                created_at=at + timedelta(minutes=n),
            )
            .id
            for n in range(3)
        ]

    new = _migrate(latest)

    ledger = new.get_model("billing", "LedgerTransaction").objects
    for wallet_id, ids in made.items():
        numbered = list(ledger.filter(wallet_id=wallet_id).order_by("seq").values_list("id", "seq"))
        assert numbered == [(pk, n + 1) for n, pk in enumerate(ids)]
        wallet = new.get_model("billing", "Wallet").objects.get(pk=wallet_id)
        assert wallet.postings == 3
    with pytest.raises(DatabaseError), transaction.atomic():
        ledger.filter(pk=made["wal_seqa"][0]).update(seq=99)
