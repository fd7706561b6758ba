"""Test data built through the services, so every object is made the way production makes it."""

import base64
import itertools
import json
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from billing.choices import TransactionKind
from billing.onboarding import user_create_operator, user_signup
from billing.services import ledger_post
from instances.provisioning import converge
from starverse.accounts.models import ApiToken, SshKey, User
from starverse.accounts.services import ssh_key_add, token_create
from starverse.core import kube

PASSWORD = "correct horse battery staple"
FIXTURES = Path(__file__).parent / "fixtures"
SSH_KEYS: dict[str, dict[str, Any]] = json.loads((FIXTURES / "ssh_keys.json").read_text())
_seq = itertools.count(1)


def make_user(email: str | None = None) -> User:
    return user_signup(email=email or f"user{next(_seq)}@lab.example.edu.cn", password=PASSWORD)


def make_operator(email: str | None = None) -> User:
    return user_create_operator(
        email=email or f"ops{next(_seq)}@starverse.example", password=PASSWORD
    )


def make_token(user: User, name: str = "ci") -> tuple[ApiToken, str]:
    return token_create(user=user, name=name)


def ed25519_public_key(comment: str = "") -> str:
    """A well-formed ed25519 public key with random key bytes (a different key each call)."""
    blob = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + os.urandom(32)
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}".strip()


def make_ssh_key(user: User, name: str = "laptop") -> SshKey:
    return ssh_key_add(user=user, name=name, public_key=ed25519_public_key())


# Objects that a user owns, by model: the generated tenancy test uses this to create an object
# of user A for every tenant-scoped API endpoint. A new endpoint's model must be added here.
def _ledger_row(user: User) -> Any:
    return user.tenant.wallet.transactions.first()


def _topup(user: User) -> Any:
    from billing.models import TopUp

    return TopUp.objects.create(
        tenant=user.tenant, wallet=user.tenant.wallet, created_by=user, amount_fen=5_000
    )


def make_instance(user: User, status: str = "queued") -> Any:
    from django.utils import timezone

    from fleet.models import GpuModel
    from instances.models import Image, Instance, Offering

    model, _ = GpuModel.objects.get_or_create(
        id="h100-80g",
        defaults={
            "name": "H100 80GB SXM",
            "product": "NVIDIA H100 80GB HBM3",
            "memory_gb": 80,
            "interconnect": "nvlink",
        },
    )
    offering, _ = Offering.objects.get_or_create(
        name="1× H100 80GB SXM",
        defaults={
            "kind": "cloud",
            "gpu_model": model,
            "gpu_count": 1,
            "cpu_cores": 24,
            "memory_gb": 240,
            "local_disk_gb": 1000,
            "price_per_hour_fen": 2200,
        },
    )
    image, _ = Image.objects.get_or_create(
        id="pytorch-2.1",
        defaults={
            "name": "PyTorch 2.1",
            "description": "base",
            "container_image": "starverse/pytorch:2.1",
        },
    )
    return Instance.objects.create(
        tenant=user.tenant,
        created_by=user,
        name="job",
        offering=offering,
        image=image,
        status=status,
        queued_at=timezone.now(),
    )


def make_disk(user: User, name: str = "ckpt", size_gb: int = 100) -> Any:
    from starverse.core.kube import namespace_name
    from storage.manifests import cloud_disk_name
    from storage.models import Disk

    disk = Disk(
        tenant_id=user.tenant_id, created_by=user, name=name, size_gb=size_gb, status="available"
    )
    disk.k8s_namespace, disk.k8s_name = namespace_name(user.tenant_id), cloud_disk_name(disk.id)
    disk.save(force_insert=True)
    return disk


OWNED_OBJECT_FACTORIES: dict[str, Callable[[User], Any]] = {
    "instances.Instance": make_instance,
    "storage.Disk": make_disk,
    "billing.TopUp": _topup,
    "accounts.ApiToken": lambda user: make_token(user)[0],
    "accounts.SshKey": make_ssh_key,
    "billing.LedgerTransaction": _ledger_row,
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


def read_existing(kind: str, namespace: str, name: str) -> dict[str, Any]:
    """An object the test expects on the cluster (fails the test if it is not there)."""
    found = kube.read(kind, namespace, name)
    assert found is not None, f"no {kind} {namespace}/{name} on the cluster"
    return found
