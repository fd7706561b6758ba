"""The restore drill of docs/operator-guide.md "Backups and restore", as an operator runs it: a
populated platform (people and a team with a budget, wallets and their ledger, usage posted by
the meter, an instance ordered on the Kubernetes emulator, an invoice request) is dumped with
pg_dump, restored with pg_restore into a new database, and the restored platform starts (Django's
checks, then gunicorn serving /readyz and the API with a token made before the dump),
`billing_audit` passes on it, and every wallet's balances, and every table's rows, equal the
source's."""

import http.client
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from django.apps import apps
from django.db import connection
from psycopg2 import sql

from billing.invoices import invoice_profile_save, invoice_request
from billing.models import Wallet
from tests.conftest import served_database_url
from tests.core.test_keep_alive import GUNICORN, GUNICORN_OPTIONS, _free_port, _serves
from tests.factories import (
    fund,
    make_instance,
    make_team_with_budget,
    make_token,
    make_user,
    usage_hour,
)

REPO = Path(__file__).resolve().parents[2]
BALANCES = (
    "SELECT id, tenant_id, cash_fen, promo_fen, arrears_fen, pending_cash_fen, "
    "pending_promo_fen, postings FROM billing_wallet ORDER BY id"
)
# the tables the drill must find again with every row (by model label)
KEPT = [
    "accounts.Tenant",
    "accounts.User",
    "accounts.Membership",
    "accounts.Budget",
    "accounts.ApiToken",
    "billing.Wallet",
    "billing.LedgerTransaction",
    "billing.LedgerEntry",
    "billing.InvoiceProfile",
    "billing.InvoiceRequest",
    "compute.Holding",
    "instances.Instance",
    "instances.InstanceEvent",
]


def _populate() -> tuple[str, str]:
    """Rows of every kind the drill checks, made through the services; a token's secret and
    its owner's tenant."""
    ana, bob, _team = make_team_with_budget()
    carol = make_user()
    for person in (ana, bob, carol):
        fund(person, 80_000, key="drill")
    instance = make_instance(carol)
    usage_hour(carol.tenant.wallet, instance.id, 0)
    invoice_profile_save(
        tenant_id=ana.tenant_id,
        data={"title": "清华大学", "tax_number": "91350100M000100Y43", "email": "f@x.cn"},
    )
    invoice_request(user=ana, amount_fen=30_000)
    return make_token(carol)[1], carol.tenant_id


def _rows(url: str, query: str | sql.Composable) -> list[tuple[Any, ...]]:
    with psycopg2.connect(url) as db, db.cursor() as cursor:
        cursor.execute(query)
        return list(cursor.fetchall())


def _run(*command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture
def restored_url() -> Iterator[str]:
    """A new, empty database beside the test database's; dropped afterwards."""
    name = f"{connection.settings_dict['NAME']}_restored"
    source = served_database_url()
    admin = source.rsplit("/", 1)[0] + "/postgres"

    def drop() -> None:
        db = psycopg2.connect(admin)
        db.autocommit = True
        with db.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        db.close()

    drop()
    db = psycopg2.connect(admin)
    db.autocommit = True
    with db.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    db.close()
    yield source.rsplit("/", 1)[0] + f"/{name}"
    drop()


def _platform_env(database_url: str) -> dict[str, str]:
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    env.update(DJANGO_SETTINGS_MODULE="starverse.settings.test", DATABASE_URL=database_url)
    return env


def _serve_and_ask(database_url: str, token: str, log: Path) -> tuple[int, int, dict[str, Any]]:
    """gunicorn on the restored database: /readyz's status and the balance the API answers."""
    port = _free_port()
    with log.open("wb") as out:
        server = subprocess.Popen(
            [*GUNICORN, *GUNICORN_OPTIONS, "--bind", f"127.0.0.1:{port}"],
            cwd=REPO,
            env=_platform_env(database_url),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not _serves(port):
            assert server.poll() is None, "gunicorn exited:\n" + log.read_text()
            assert time.monotonic() < deadline, "gunicorn did not serve:\n" + log.read_text()
            time.sleep(0.2)
        client = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        client.request("GET", "/readyz")
        ready = client.getresponse()
        ready.read()
        client.request(
            "GET", "/api/v1/billing/balance", headers={"Authorization": f"Bearer {token}"}
        )
        answer = client.getresponse()
        return ready.status, answer.status, json.loads(answer.read())
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.django_db(transaction=True)
def test_a_dump_restored_into_a_new_database_serves_with_the_same_balances(
    catalog, restored_url, tmp_path
):
    token, tenant_id = _populate()
    source = served_database_url()
    assert (
        _run(sys.executable, "manage.py", "billing_audit", env=_platform_env(source)).returncode
        == 0
    )

    dump = tmp_path / "starverse.dump"
    pg_dump, pg_restore = shutil.which("pg_dump"), shutil.which("pg_restore")
    assert pg_dump and pg_restore, "the drill needs PostgreSQL's client tools (postgresql-client)"
    # the commands of docs/operator-guide.md "Backups and restore", small installations
    dumped = _run(pg_dump, "--format=custom", "--file", str(dump), "--dbname", source)
    assert dumped.returncode == 0, dumped.stderr
    restored = _run(
        pg_restore,
        "--no-owner",
        "--exit-on-error",
        "--jobs",
        "2",
        "--dbname",
        restored_url,
        str(dump),
    )
    assert restored.returncode == 0, restored.stderr

    checked = _run(
        sys.executable,
        "manage.py",
        "check",
        "--database",
        "default",
        env=_platform_env(restored_url),
    )
    assert checked.returncode == 0, checked.stderr
    audit = _run(sys.executable, "manage.py", "billing_audit", env=_platform_env(restored_url))
    assert audit.returncode == 0, audit.stderr
    wallets = Wallet.objects.count()
    assert audit.stdout.startswith(f"OK: {wallets} wallet(s) equal their ledger sums.")

    before = _rows(source, BALANCES)
    assert len(before) == wallets >= 4 and any(row[2] for row in before)
    assert _rows(restored_url, BALANCES) == before
    for label in KEPT:
        table = apps.get_model(label)._meta.db_table
        count = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
        assert _rows(restored_url, count) == _rows(source, count) != [(0,)], label

    ready, status, balance = _serve_and_ask(restored_url, token, tmp_path / "gunicorn.log")
    assert (ready, status) == (200, 200)
    wallet = Wallet.objects.get(tenant_id=tenant_id)
    assert {k: balance[k] for k in wallet.balance_shown()} == wallet.balance_shown()
    assert balance["cash_fen"] > 0
