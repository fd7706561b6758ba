"""A client generated from the schema by openapi-python-client rents an instance and stops it
again against a live server. Nothing but the generated client talks to the API, so an answer
that differs from the schema (an undeclared envelope, a missing field, an undeclared status)
breaks the client here the way it would break anyone's."""

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command

from instances.provisioning import converge
from tests.factories import PASSWORD, converge_until

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PACKAGE = "starverse_schema_client"


@pytest.fixture
def generated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The client package generated from the code's schema, imported."""
    schema, out, config = tmp_path / "openapi.yaml", tmp_path / "client", tmp_path / "config.yaml"
    call_command("spectacular", file=str(schema), validate=True)
    config.write_text(
        f"project_name_override: {PACKAGE.replace('_', '-')}\n"
        f"package_name_override: {PACKAGE}\n"
        "post_hooks: []\n"  # no formatter runs, so no network and no extra tools
        # downloads (invoice and statement PDFs) are bytes to the client
        "content_type_overrides:\n  application/pdf: application/octet-stream\n"
        # a SkyPilot task (POST /jobs as text/yaml) is bytes sent as they are
        "  text/yaml: application/octet-stream\n"
    )
    result = subprocess.run(
        [GENERATOR, "generate", "--path", schema, "--output-path", out, "--config", config],
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # the generator skips what it cannot read, with a warning: here that is a failure
    assert "warning" not in output.lower(), output
    monkeypatch.syspath_prepend(str(out))
    yield importlib.import_module(PACKAGE)
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
        del sys.modules[name]


def _module(package: Any, name: str) -> Any:
    return importlib.import_module(f"{package.__name__}.{name}")


def test_a_generated_client_rents_and_stops_an_instance(
    generated, live_server, transactional_db, catalog, mailoutbox
):
    api = lambda name: _module(generated, f"api.{name}")  # noqa: E731
    models = _module(generated, "models")
    options = {
        "base_url": live_server.url,
        "raise_on_unexpected_status": True,  # an undeclared status is an error
        "timeout": httpx.Timeout(30),
        "httpx_args": {"trust_env": False},  # straight to the live server, never a proxy
    }
    # (each client closes its connection at the end: a kept-alive one would hold a database
    # session open in the live server's request thread)
    with generated.Client(**options) as anon:
        signed = api("auth.auth_signup").sync(
            client=anon,
            body=models.SignupInputRequest(email="client@lab.example.edu.cn", password=PASSWORD),
        )
    assert isinstance(signed, models.SignupOutput), signed
    assert signed.trial.status == models.TrialStatusEnum.PENDING_VERIFICATION
    link = next(line for line in mailoutbox[0].body.splitlines() if "/verify-email/" in line)
    with generated.Client(**options) as anon:
        verified = api("auth.auth_verify_email").sync(
            client=anon,
            body=models.VerifyEmailInputRequest(token=link.rstrip("/").rsplit("/", 1)[1]),
        )
    assert isinstance(verified, models.VerifyEmailOutput), verified
    assert verified.trial.status == models.TrialStatusEnum.GRANTED
    with generated.AuthenticatedClient(token=signed.token, **options) as client:
        _rent_and_stop(client, api, models)


def _rent_and_stop(client: Any, api: Any, models: Any) -> None:
    S = models.InstanceStatusEnum
    balance = api("me.me_retrieve").sync(client=client).balance.total_fen
    offerings = api("offerings.offerings_list").sync(client=client)
    images = api("images.images_list").sync(client=client)

    assert isinstance(offerings, models.OfferingOutputList), offerings
    assert offerings.count == len(offerings.results) > 0
    affordable = [
        o
        for o in offerings.results
        if o.kind == models.OfferingOutputKindEnum.CLOUD
        and o.available > 0
        and o.price_per_hour_fen <= balance
    ]
    offering = min(affordable, key=lambda o: o.price_per_hour_fen)  # the trial credit pays it
    image = next(i for i in images.results if i.id == "pytorch-2.1")

    order = models.InstanceCreateInputRequest(offering=offering.id, image=image.id, name="check")
    create = api("instances.instances_create")
    ordered = create.sync(client=client, body=order, idempotency_key="rent-1")
    repeated = create.sync(client=client, body=order, idempotency_key="rent-1")

    assert isinstance(ordered, models.InstanceOutput), ordered
    assert (ordered.offering, ordered.gpu_count) == (offering.id, offering.gpu_count)
    assert ordered.status in (S.PROVISIONING, S.RUNNING)  # tasks run eagerly in tests
    assert repeated.id == ordered.id
    assert converge_until(converge.provision, ordered.id) == "running"

    read = api("instances.instances_retrieve")
    running = read.sync(client=client, id=ordered.id)
    assert running.status == S.RUNNING
    assert isinstance(running.ssh, models.SshOutput) and running.ssh.port > 0

    stopping = api("instances.instances_stop").sync(client=client, id=ordered.id)
    assert stopping.status in (S.STOPPING, S.STOPPED)
    assert converge_until(converge.stop, ordered.id) == "stopped"
    stopped = read.sync(client=client, id=ordered.id)
    assert (stopped.status, stopped.ssh) == (S.STOPPED, None)

    events = api("instances.instances_events_list").sync(client=client, id=ordered.id)
    statuses = [event.status for event in events.results]
    moves = [s for i, s in enumerate(statuses) if i == 0 or s != statuses[i - 1]]
    assert moves == [S.QUEUED, S.PROVISIONING, S.RUNNING, S.STOPPING, S.STOPPED]
    again = api("instances.instances_stop").sync(client=client, id=ordered.id)
    assert isinstance(again, models.Error) and again.code == "wrong_state"
