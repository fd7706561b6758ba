"""Test data built through the services, so every object is made the way production makes it."""

import base64
import io
import itertools
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyotp
from django.core.management import call_command
from django.db import transaction
from django.test import Client

from billing.choices import TransactionKind
from billing.onboarding import team_create, user_create_operator, user_email_verify, user_signup
from billing.services import Accrual, Settlement, ledger_post, usage_accrue_many, usage_settle_many
from instances.budgets import budget_set
from instances.provisioning import converge
from starverse.accounts import loginflow
from starverse.accounts.models import ApiToken, SshKey, User
from starverse.accounts.selectors import two_factor_enabled
from starverse.accounts.services import ssh_key_add, token_create
from starverse.accounts.teams import invitation_accept, invitation_create, invitation_token
from starverse.accounts.twofactor import totp_begin, totp_confirm
from starverse.core import kube

PASSWORD = "correct horse battery staple"
FIXTURES = Path(__file__).parent / "fixtures"
SSH_KEYS: dict[str, dict[str, Any]] = json.loads((FIXTURES / "ssh_keys.json").read_text())
_seq = itertools.count(1)


def make_user(email: str | None = None, *, verified: bool = True) -> User:
    """A person who signed up and, unless `verified=False`, verified their address: with the
    ¥10 trial on the balance when the address is the first of its canonical form."""
    user = user_signup(email=email or f"user{next(_seq)}@lab.example.edu.cn", password=PASSWORD)
    if verified:
        user_email_verify(user=user)
    return user


def make_operator(email: str | None = None) -> User:
    return user_create_operator(
        email=email or f"ops{next(_seq)}@starverse.example", password=PASSWORD
    )


def enrol_totp(user: User) -> tuple[str, list[str]]:
    """Two-factor authentication turned on the way the Security page does it, confirmed with
    the app's current code: the secret (for pyotp.TOTP(secret).at(t)) and the recovery codes."""
    secret = totp_begin(user=user).secret
    codes = totp_confirm(user=user, code=pyotp.TOTP(secret).now())
    return secret, codes


def staff_login(client: Client, operator: User) -> User:
    """Sign `client` in as `operator` on a session that passed the second factor, as the log-in's
    code step leaves it (REQUIRE_2FA_FOR_STAFF keeps every other staff session out of the admin
    and the console); the operator's authenticator is set up first if it is not."""
    if not two_factor_enabled(operator):
        enrol_totp(operator)
    client.force_login(operator)
    session = client.session
    session[loginflow.VERIFIED_KEY] = str(operator.pk)
    session.save()
    return operator


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
    """A pending top-up, its checkout opened on the Stripe stand-in (the `payments` fixture)."""
    from billing.payments import topup_create

    return topup_create(user=user, amount_fen=5_000)


def _invoice_request(user: User) -> Any:
    """An invoice request over ¥100 paid, to a saved invoice profile."""
    from billing.invoices import invoice_profile_save, invoice_request

    fund(user, 10_000, key="invoice")
    invoice_profile_save(
        tenant_id=user.tenant_id,
        data={"title": "清华大学", "tax_number": "91350100M000100Y43", "email": "f@x.cn"},
    )
    return invoice_request(user=user, amount_fen=10_000)[0]


CLOUD_GPU = "1× H100 80GB SXM"
IMAGE = "pytorch-2.1"


def _seed_catalog() -> None:
    from compute.models import Offering

    if not Offering.objects.exists():
        call_command("seed_catalog", stdout=io.StringIO())


def make_instance(user: User, status: str | None = None, *, cluster: Any = None) -> Any:
    """A 1× H100 instance ordered through `instance_order` (the catalog seeded if it is not, the
    balance topped up to the runway ordering needs if it is short: an hour of it and of what the
    tenant's instances burn), as ordered: queued when the fleet has no free GPU,
    provisioning when placed (its task runs only after commit). A `status` is reached the way
    production reaches it, on the cluster the test points the platform at (`catalog`):
    "running" provisioned, "stopped" stopped after running, "failed" when its image cannot be
    pulled (pass the emulator as `cluster`; its image pull failures are cleared afterwards)."""
    from billing.selectors import wallet_for_tenant
    from compute.models import Image, Offering
    from instances.lifecycle import instance_order, instance_stop
    from instances.selectors import spend_per_hour_fen

    _seed_catalog()
    offering = Offering.objects.get(name=CLOUD_GPU)
    burn = spend_per_hour_fen([user.tenant_id], starting=True).get(user.tenant_id, 0)
    wallet = wallet_for_tenant(user.tenant_id)
    # the runway in cash: trial credit pays only offerings with a trial price (1× H100 has none)
    short = offering.price_per_hour_fen + burn - (wallet.cash_free_fen - wallet.arrears_fen)
    if short > 0:
        fund(user, short, key=f"runway:{next(_seq)}")
    if status == "failed":
        if cluster is None:
            raise TypeError("a failed instance needs the kube emulator: pass cluster=")
        cluster.fail_image_pull(Image.objects.get(pk=IMAGE).container_image)
    try:
        instance, _created = instance_order(
            user=user, offering_id=offering.id, image_id=IMAGE, name="job"
        )
        if status is None:
            return instance
        assert instance.status == "provisioning", f"not placed: no {status} instance without GPUs"
        reached = converge_until(converge.provision, instance.id)
    finally:
        if status == "failed":
            cluster.clear_image_pull_failures()
    if status == "stopped":
        instance_stop(instance_id=instance.id)
        reached = converge_until(converge.stop, instance.id)
    assert reached == status, f"the instance became {reached}, not {status}"
    instance.refresh_from_db()
    return instance


def holding_save(
    row: Any,
    *,
    placement: tuple[Any, list[int]] | None = None,
    waiting: bool = True,
    queued_at: Any = None,
) -> Any:
    """The GPU holding (compute.models.Holding, of the row's id) of an instance or an endpoint
    replica a test writes by hand, saved with the allocations of `placement` (node, indices):
    every product row has one, as its services make it."""
    from compute.choices import HoldingKind
    from compute.holdings import holding_new
    from compute.models import Allocation

    replica = row.id.startswith("epr_")
    owner = row.endpoint if replica else row
    holding, held = holding_new(
        holding_id=row.id,
        kind=HoldingKind.REPLICA if replica else HoldingKind.INSTANCE,
        tenant_id=owner.tenant_id,
        created_by_id=owner.created_by_id,
        offering=owner.offering,
        billing="hourly" if replica else row.billing,
        region_id=None if replica else row.region_id,
        parent=str(row.endpoint_id) if replica else "",
        placement=placement,
        waiting=waiting,
        queued_at=queued_at,
    )
    holding.save(force_insert=True)
    Allocation.objects.bulk_create(held)
    return holding


def make_disk(user: User, name: str = "ckpt", size_gb: int = 100) -> Any:
    """A cloud disk made by `disk_create` (its first day charged), as created: its claim is made
    by the storage task after commit."""
    from billing.selectors import wallet_for_tenant
    from storage.disks import disk_create
    from storage.models import StoragePrice

    _seed_catalog()
    day = size_gb * StoragePrice.objects.get(kind="disk").price_per_gb_day_fen
    short = day - wallet_for_tenant(user.tenant_id).cash_fen  # storage is paid from cash only
    if short > 0:
        fund(user, short, key=f"disk:{next(_seq)}")
    return disk_create(user=user, name=name, size_gb=size_gb)


def make_image(user: User, name: str = "my-env") -> Any:
    """A tenant's own image brought by reference (no credentials: no cluster call)."""
    from instances.images import image_import

    return image_import(
        user=user, name=f"{name}-{next(_seq)}", reference="docker.io/pytorch/pytorch:2.3.1"
    )


WHOLE_NODE = "8× H100 80GB SXM bare metal"


def make_cluster(user: User, node_count: int = 2, **order: Any) -> Any:
    """A cluster of whole H100 nodes ordered through `cluster_order` (the catalog seeded if it
    is not, the balance topped up to its runway: an hour of every node and of what the tenant's
    instances burn), as ordered: placed when enough whole nodes are free, else queued."""
    from billing.selectors import wallet_for_tenant
    from clusters.services import cluster_order
    from compute.models import Offering
    from instances.selectors import spend_per_hour_fen

    _seed_catalog()
    offering = Offering.objects.get(name=WHOLE_NODE)
    burn = spend_per_hour_fen([user.tenant_id], starting=True).get(user.tenant_id, 0)
    need = offering.price_per_hour_fen * node_count + burn
    wallet = wallet_for_tenant(user.tenant_id)
    short = need - (wallet.cash_fen - wallet.arrears_fen)  # the runway in cash
    if short > 0:
        fund(user, short, key=f"runway:{next(_seq)}")
    cluster, _created = cluster_order(
        user=user,
        offering_id=offering.id,
        image_id=IMAGE,
        node_count=node_count,
        **{"template": "deepspeed", **order},
    )
    return cluster


def make_public_model(directory: str = "qwen2-7b-instruct") -> Any:
    """A model of the public pool (kind model), made once per folder."""
    from datasets.models import PublicDataset

    model, _created = PublicDataset.objects.get_or_create(
        kind="model",
        directory=directory,
        defaults={"id": directory, "name": directory, "size_bytes": 15 * 2**30, "licence": "MIT"},
    )
    return model


def make_endpoint(user: User, **create: Any) -> Any:
    """An endpoint made by `endpoint_create`, serving a public-pool model with vLLM on one
    H100 (the balance topped up to an hour of it), as created: its objects are made by the
    worker after commit."""
    from compute.models import Offering
    from endpoints.services import endpoint_create

    _seed_catalog()
    offering = Offering.objects.get(name=CLOUD_GPU)
    fund(user, offering.price_per_hour_fen * 4, key=f"endpoint:{next(_seq)}")
    fields: dict[str, Any] = {
        "name": "qwen",
        "source": {"dataset": make_public_model().pk},
        "engine": "vllm",
        "offering_id": offering.id,
        "min_replicas": 1,
        "max_replicas": 2,
        **create,
    }
    endpoint, _created = endpoint_create(user=user, **fields)
    return endpoint


def make_job(user: User, command: str = "python train.py", **request: Any) -> Any:
    """A one-GPU job submitted through `job_submit` (the catalog seeded if it is not, the
    balance topped up to an hour of it): its rank placed or queued, its task not run."""
    from billing.selectors import wallet_for_tenant
    from compute.models import Offering
    from jobs.services import JobRequest, job_submit

    _seed_catalog()
    offering = Offering.objects.get(name=CLOUD_GPU)
    wallet = wallet_for_tenant(user.tenant_id)
    short = offering.price_per_hour_fen * 2 - (wallet.cash_fen - wallet.arrears_fen)
    if short > 0:
        fund(user, short, key=f"runway:{next(_seq)}")
    job, _created = job_submit(
        user=user,
        request=JobRequest(
            offering_id=offering.id,
            image_id=IMAGE,
            command=command,
            **{"nas": False, **request},
        ),
    )
    return job


def make_webhook(user: User) -> Any:
    """A webhook of the user's acting tenant, on a loopback URL the guard refuses at send time
    (the tests' settings allow no internal address), so nothing leaves the machine."""
    from events.models import Webhook
    from events.signing import secret_new

    return Webhook.objects.create(
        tenant_id=user.tenant_id,
        created_by=user,
        url="http://127.0.0.1:9/hook",
        events=["job.failed"],
        secret=secret_new(),
    )


def make_channel(user: User) -> Any:
    from events.models import NotificationChannel

    return NotificationChannel.objects.create(
        tenant_id=user.tenant_id,
        created_by=user,
        kind="email",
        target=user.email,
        events=["job.failed"],
    )


OWNED_OBJECT_FACTORIES: dict[str, Callable[[User], Any]] = {
    "events.Webhook": make_webhook,
    "events.NotificationChannel": make_channel,
    "jobs.Job": make_job,
    "endpoints.Endpoint": make_endpoint,
    "instances.Instance": make_instance,
    "clusters.Cluster": make_cluster,
    "storage.Disk": make_disk,
    "compute.Image": make_image,
    "billing.TopUp": _topup,
    "accounts.ApiToken": lambda user: make_token(user)[0],
    "accounts.SshKey": make_ssh_key,
    "billing.LedgerTransaction": _ledger_row,
    "billing.InvoiceRequest": _invoice_request,
}


def fund(user: Any, fen: int, key: str = "") -> None:
    """Credit the wallet; the same amount again (or the same `key`) credits nothing more."""
    ledger_post(
        wallet_id=user.tenant.wallet.id,
        key=f"topup:test:{user.id}:{key or fen}",
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


def read_existing(kind: str, namespace: str | None, name: str) -> dict[str, Any]:
    """An object the test expects on the cluster (fails the test if it is not there)."""
    found = kube.read(kind, namespace, name)
    assert found is not None, f"no {kind} {namespace}/{name} on the cluster"
    return found


REPO = Path(__file__).resolve().parents[1]
# What production settings need to start (dummies: they are loaded, never used).
PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "starverse.settings.production",
    "SECRET_KEY": "production-check-" + "x" * 50,
    "DATABASE_URL": "postgres://unused@127.0.0.1:1/unused",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "STRIPE_SECRET_KEY": "sk_test_production_check",
    "STRIPE_WEBHOOK_SECRET": "whsec_production_check",
    "GATEWAY_CIDR": "192.0.2.0/24",
    "CLUSTER_NODE_CIDR": "192.0.2.0/24",
    "GATEWAY_DOMAIN": "gw.example.com",
    "PUBLIC_POOL_SOURCE": "nfs://nas.internal/public",
}
# Settings a test's own environment may hold that a production check must not inherit.
_LEFT_OUT = ("PUBLIC_POOL", "PUBLIC_BASE_URL", "TERMINAL_", "DEBUG", "ALLOWED_HOSTS")


def load_production_settings(**env: str | None) -> tuple[int, str]:
    """Load the production settings in a fresh interpreter with PRODUCTION_ENV and `env` (None:
    unset); (exit status, stderr)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(_LEFT_OUT)}
    clean.update(PRODUCTION_ENV)
    for name, value in env.items():
        if value is None:
            clean.pop(name, None)
        else:
            clean[name] = value
    result = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; settings.PUBLIC_POOL_SOURCE"],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.returncode, result.stderr


def holding_of(row: Any) -> Any:
    """The row's GPU holding as it is now (its place in the queue, its state)."""
    from compute.holdings import holding_of as read

    return read(row.id)


def running_since(instance_ids: list[str], since: Any) -> None:
    """Running instances (or ranks), as if they had been running since `since`: their
    `running_since` and their holdings' metering session (compute.metering) moved back."""
    from compute.models import Holding
    from instances.models import Instance

    Instance.objects.filter(pk__in=instance_ids).update(running_since=since)
    Holding.objects.filter(pk__in=instance_ids, metered_since__isnull=False).update(
        metered_since=since
    )


def usage_hour(wallet: Any, instance: str, n: int, fen_per_minute: int = 2) -> None:
    """The meter's hourly posting number `n` (from 0) for `instance`: 60 minutes from cash."""
    with transaction.atomic():
        usage_accrue_many([Accrual(wallet.id, fen_per_minute, None)] * 60)
        usage_settle_many(
            [
                Settlement(
                    wallet.id,
                    f"usage:{instance}:1:{60 * n + 1}-{60 * n + 60}",
                    instance,
                    "GPU usage",
                    60,
                    0,
                    60 * fen_per_minute,
                    0,
                )
            ]
        )


def make_team_with_budget() -> tuple[User, User, Any]:
    """ana@example.com's team "Lab", bob@example.com a member who accepted her invitation,
    with a monthly budget of ¥500.00 she set him."""
    ana = make_user("ana@example.com")
    bob = make_user("bob@example.com")
    team = team_create(user=ana, name="Lab")
    invitation = invitation_create(actor=ana, team=team, email=bob.email, role="member")
    invitation_accept(user=bob, token=invitation_token(invitation))
    budget_set(actor=ana, team=team, user_id=bob.pk, monthly_fen=500_00)
    return ana, bob, team


def host_path(emu: Any, instance: Any, path: str) -> Path:
    """Where a path inside the instance's running container is kept on the kube emulator (its
    volumes keep their files on this machine)."""
    pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    assert pod is not None and pod["status"]["phase"] == "Running"
    place = emu.volume_data.resolve(pod, pod["spec"]["containers"][0], path)
    assert place is not None, f"{path} is on no volume"
    return Path(place.path)
