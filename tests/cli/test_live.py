"""The CLI end to end against a live server: `python -m starverse_cli` in a subprocess (as the
installed `starverse` command runs it, PYTHONPATH=cli) talks over HTTP to pytest-django's live
server, whose worker tasks run eagerly, whose cluster is the session's kube emulator and whose
payments go to the Stripe stand-in.

The flow: no token → exit 3; log in with e-mail and password; top up through the stand-in's
checkout page; `rent --wait`; `ls --json`; `ssh ID -- echo hi` into the instance with the host
key pinned; `cp` a folder in and out; `stop`; `rm -y`; `balance`. The emulated pod runs
nothing, so the instance's sshd is the images' real init (Debian's sshd) in a scratch root,
serving the access Secret the platform wrote for the pod on the port the API gives (the
Service's node port).

A job's journey: `jobs submit` with the emulator's simulated trainer as the command, `jobs ls`,
`jobs logs -f` until the program ends, `jobs show`, a second job `jobs cancel --yes`; the
worker's and beat's steps (provisioning, `workloads-check`, `jobs-sync`) are driven by the
test."""

import base64
import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from compute.models import Offering
from instances.models import Instance as InstanceRow
from instances.provisioning import converge
from instances.provisioning.reconcile import workloads_check
from jobs.services import job_sync
from tests.cli.live import Cli, instance_sshd, json_of, pay
from tests.factories import (
    PASSWORD,
    converge_until,
    fund,
    make_token,
    make_user,
    read_existing,
)
from tests.sshd import user_key

OFFERING = "1× RTX 4090 24GB"  # not a premium model: no trial limit
IMAGE = "pytorch-2.1"
WAIT_S = 30.0


def while_running(process: subprocess.Popen[str], drive: Callable[[], object]) -> tuple[str, str]:
    """Carry the worker's steps through (`drive`) while the CLI waits, then its output."""
    drive()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return out, err


@pytest.fixture
def checkout(payments, live_server, settings):
    """The Stripe stand-in delivering its signed webhooks to the live server."""
    payments.webhook_url = f"{live_server.url}/webhooks/stripe"
    settings.STRIPE_WEBHOOK_SECRETS = [payments.webhook_secret]
    settings.PUBLIC_BASE_URL = live_server.url
    return payments


def _access_secret(row: InstanceRow) -> dict[str, str]:
    secret = read_existing("Secret", row.k8s_namespace, f"{row.k8s_name}-access")
    if "stringData" in secret:
        return dict(secret["stringData"])
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


def test_rent_ssh_stop_and_remove_with_the_cli(
    live_server, transactional_db, catalog, cluster, checkout, init_root, tmp_path
):
    cli = Cli(tmp_path / "home", live_server.url)

    # without a token: a clear message and exit code 3, nothing asked of the server
    refused = cli("ls")
    assert refused.returncode == 3
    assert "not logged in" in refused.stderr and "STARVERSE_TOKEN" in refused.stderr
    assert refused.stdout == ""
    assert cli("offerings").returncode == 0  # the catalog is public

    # log in with e-mail and password: the token is made, checked and saved (0600)
    user = make_user()
    login = cli("login", "--email", user.email, "--password-stdin", stdin=PASSWORD + "\n")
    assert login.returncode == 0, login.stderr
    assert user.email in login.stdout
    config = tmp_path / "home" / "starverse" / "config.json"
    assert config.stat().st_mode & 0o777 == 0o600
    assert user.api_tokens.count() == 1
    laptop, laptop_public = user_key(init_root, "laptop")
    added = json_of(cli("keys", "add", f"{laptop}.pub", "--name", "laptop", "--json"))
    assert added["name"] == "laptop"

    # top up ¥100 through the Stripe stand-in's checkout page
    topup = cli("topup", "100")
    assert topup.returncode == 0, topup.stderr
    checkout_url = topup.stdout.strip()
    assert checkout_url.startswith(f"{checkout.url}/pay/")
    pay(checkout_url)
    deadline = time.monotonic() + WAIT_S
    while True:
        balance = json_of(cli("balance", "--json"))
        if balance["cash_fen"] == 10_000:
            break
        assert time.monotonic() < deadline, f"the top-up was not credited: {balance}"
        time.sleep(0.1)
    assert balance["promo_fen"] == 1_000

    # rent --wait, by the offering's name; the worker's retrying task carries it through
    process = cli.start(
        "rent",
        OFFERING,
        *("--image", IMAGE, "--name", "cli-job", "--stop-after", "8", "--idle-stop", "7:45"),
        *("--wait", "--json"),
    )
    row = _wait_for_row(user)
    out, err = while_running(process, lambda: converge_until(converge.provision, row.pk))
    rented = json.loads(out)
    assert rented["id"] == row.pk
    assert rented["status"] == "running"
    assert rented["ssh"]["host_key_fingerprint"].startswith("SHA256:")
    assert f"{row.pk}: running" in err  # plain progress lines off a terminal
    assert rented["idle_stop"] == {"util_pct": 7, "minutes": 45}
    assert rented["stop_at"] is not None

    # set: the automatic stops change and clear through PATCH /instances/{id}
    cleared = json_of(cli("set", row.pk, "--no-stop-at", "--no-idle-stop", "--json"))
    assert (cleared["stop_at"], cleared["idle_stop"]) == (None, None)
    changed = json_of(cli("set", row.pk, "--stop-after", "3", "--idle-stop", "10:60", "--json"))
    assert changed["idle_stop"] == {"util_pct": 10, "minutes": 60}
    row.refresh_from_db()
    assert row.stop_policy.stop_at is not None and row.stop_policy.idle_stop_minutes == 60

    listed = json_of(cli("ls", "--json"))
    assert [(item["id"], item["status"], item["name"]) for item in listed] == [
        (row.pk, "running", "cli-job")
    ]

    # ssh: the instance's sshd (the images' init) with the platform's host key and the Secret's
    # authorized keys, on the port the API gives
    row.refresh_from_db()
    secret = _access_secret(row)
    assert laptop_public in secret["authorized_keys"]
    sshd = instance_sshd(init_root, secret, rented["ssh"]["port"])
    try:
        session = cli("ssh", row.pk, "-i", str(laptop), "-o", "BatchMode=yes", "--", "echo", "hi")
        assert session.returncode == 0, session.stderr + sshd.log.read_text()
        assert session.stdout == "hi\n"
        pinned = (tmp_path / "home" / "starverse" / "known_hosts").read_text().split()
        assert pinned[0] == f"[127.0.0.1]:{sshd.port}"
        assert f"{pinned[1]} {pinned[2]}" == sshd.host_key.public_openssh
        status = cli("ssh", row.pk, "-i", str(laptop), "-o", "BatchMode=yes", "--", "exit 3")
        assert status.returncode == 3  # the remote command's status comes back

        # cp: a folder in, by the instance's name, and back out (rsync, the pinned key)
        folder = tmp_path / "code"
        folder.mkdir()
        (folder / "train.py").write_text("print('hi')\n")
        data = init_root / "root" / "data"
        into = cli("cp", str(folder), f"cli-job:{data}", "-i", str(laptop), "-o", "BatchMode=yes")
        assert into.returncode == 0, into.stderr
        assert (data / "code" / "train.py").read_text() == "print('hi')\n"
        back = tmp_path / "back"
        out_of = cli("cp", f"{row.pk}:{data}/code/", str(back), "-i", str(laptop), "--json")
        assert json_of(out_of)["transport"] == "rsync"
        assert (back / "train.py").read_text() == "print('hi')\n"
    finally:
        sshd.kill()

    # stop --wait; the instance keeps its disk and stops costing
    process = cli.start("stop", row.pk, "--wait")
    out, _err = while_running(process, lambda: _stop_once_asked(row.pk))
    assert out == f"{row.pk}: stopped\n"
    stopped = json_of(cli("show", row.pk, "--json"))
    assert stopped["status"] == "stopped" and stopped["ssh"] is None
    no_ssh = cli("ssh", row.pk)
    assert no_ssh.returncode == 6
    assert "stopped" in no_ssh.stderr

    # rm without -y off a terminal refuses; with -y it terminates
    asked = cli("rm", row.pk)
    assert asked.returncode == 2
    assert json_of(cli("show", row.pk, "--json"))["status"] == "stopped"
    removed = json_of(cli("rm", row.pk, "-y", "--json"))
    assert removed["status"] in ("terminating", "terminated")  # the eager task may be done
    assert converge_until(converge.terminate, row.pk) == "terminated"
    assert json_of(cli("ls", "--json")) == []
    assert [item["status"] for item in json_of(cli("ls", "--all", "--json"))] == ["terminated"]

    # balance: what the API says, in yuan for people
    final = json_of(cli("balance", "--json"))
    row.refresh_from_db()
    assert final["total_fen"] == 11_000 - row.cost_fen
    human = cli("balance")
    assert f"¥{(11_000 - row.cost_fen) // 100:,}." in human.stdout

    # an unknown instance is 4, another state's action 6, a bad token 3
    assert cli("show", "ins_doesnotexist").returncode == 4
    assert cli("start", row.pk).returncode == 6
    cli.env["STARVERSE_TOKEN"] = "sv_not_a_valid_token_000000"
    bad = cli("ls")
    assert bad.returncode == 3
    assert "starverse login" in bad.stderr


def _stop_once_asked(instance_id: str) -> str:
    """The stop converged as the worker's retrying task would, once the CLI's request has
    arrived (before it, the step finds a running instance and does nothing; the request's own
    eager task gives up while the emulated pod is still terminating on a loaded machine)."""
    deadline = time.monotonic() + WAIT_S
    while InstanceRow.objects.get(pk=instance_id).status not in ("stopping", "stopped"):
        assert time.monotonic() < deadline, "the stop did not arrive"
        time.sleep(0.05)
    return converge_until(converge.stop, instance_id)


def _wait_for_row(user: Any) -> InstanceRow:
    deadline = time.monotonic() + WAIT_S
    while True:
        row = InstanceRow.objects.filter(tenant_id=user.tenant_id).first()
        if row is not None:
            return row
        assert time.monotonic() < deadline, "the order did not arrive"
        time.sleep(0.05)


def test_log_in_for_a_team_and_whoami_with_the_cli(live_server, transactional_db, tmp_path):
    from billing.onboarding import team_create

    cli = Cli(tmp_path / "home", live_server.url)
    user = make_user()
    team = team_create(user=user, name="NLP lab")

    login = cli(
        "login", "--email", user.email, "--password-stdin", "--team", "nlp lab", stdin=PASSWORD
    )
    assert login.returncode == 0, login.stderr
    assert f"for team NLP lab ({team.pk}, owner)" in login.stdout
    me = json_of(cli("whoami", "--json"))
    assert me["team"] == {"id": team.pk, "name": "NLP lab", "role": "owner"}
    assert me["scopes"] == ["read", "instances", "billing", "admin"]
    assert "Role:     owner" in cli("whoami").stdout

    # a pasted token is its own team's: a personal one is not saved for the team
    _token, personal = make_token(user)
    refused = cli("login", "--token", personal, "--team", team.pk)
    assert refused.returncode == 2
    assert "acts for your own account" in refused.stderr
    assert json_of(cli("whoami", "--json"))["team"]["id"] == team.pk  # the team's token is kept
    unknown = cli(
        "login", "--email", user.email, "--password-stdin", "--team", "Robotics", stdin=PASSWORD
    )
    assert unknown.returncode == 4


TRAINER = "starverse-sim-train --steps {steps} --step-seconds {seconds}"


def _job_rank(job_id: str) -> InstanceRow:
    return InstanceRow.objects.get(job_rank__job_id=job_id, job_rank__index=0)


def _job_running(job_id: str) -> InstanceRow:
    """The job's rank provisioned and the job following it, as the worker's retrying task and
    beat's `jobs-sync` would (the live server's eager tasks give up while the pod starts)."""
    rank = _job_rank(job_id)
    assert converge_until(converge.provision, rank.pk) == "running"
    assert job_sync(job_id) == "running"
    return rank


def test_a_job_submitted_followed_and_cancelled_with_the_cli(
    live_server, transactional_db, catalog, cluster, tmp_path
):
    """`jobs submit` with the simulated trainer as the command, `jobs ls`, `jobs logs -f`
    until the program ends, `jobs show`; a second job cancelled with `jobs cancel --yes`."""
    cli = Cli(tmp_path / "home", live_server.url)
    user = make_user()
    fund(user, 1_000_000)
    cli.env["STARVERSE_TOKEN"] = make_token(user)[1]
    offering = Offering.objects.get(name=OFFERING)

    # submit by the offering's name (the CLI finds its id), a command after `--`
    command = TRAINER.format(steps=6, seconds=0.2)
    submitted = json_of(
        cli(
            *("jobs", "submit", "--name", "sft", "--image", IMAGE, "--offering", OFFERING),
            *("--env", "LR=3e-5", "--max-restarts", "1", "--json", "--", command),
        )
    )
    job_id = submitted["id"]
    assert job_id.startswith("job_")
    assert (submitted["offering"], submitted["command"], submitted["env"]) == (
        offering.pk,
        command,
        {"LR": "3e-5"},
    )
    assert (submitted["max_restarts"], submitted["nas"], submitted["notes"]) == (1, False, [])
    assert submitted["status"] in ("queued", "provisioning")

    rank = _job_running(job_id)
    listed = json_of(cli("jobs", "ls", "--json"))
    assert [(row["id"], row["status"], row["name"]) for row in listed] == [
        (job_id, "running", "sft")
    ]
    table = cli("jobs", "ls").stdout.splitlines()
    assert table[0].split() == ["ID", "NAME", "STATUS", "NODES", "RESTARTS", "COST", "STARTED"]
    assert table[1].split()[:5] == [job_id, "sft", "running", "1", "0"]

    # logs -f: the lines as the trainer writes them, until the job ends: its program's end
    # found (beat's `workloads-check`) and the job following it (`jobs-sync`)
    def program_ends() -> None:
        deadline = time.monotonic() + WAIT_S
        while read_existing("Pod", rank.k8s_namespace, rank.k8s_name)["status"].get(
            "phase"
        ) not in ("Succeeded", "Failed"):
            assert time.monotonic() < deadline, "the trainer did not end"
            time.sleep(0.05)
        assert workloads_check() == [rank.pk]
        assert job_sync(job_id) == "succeeded"

    out, _err = while_running(cli.start("jobs", "logs", job_id, "-f"), program_ends)
    lines = out.splitlines()
    steps = [line.split(" loss=")[0] for line in lines if line.startswith("step ")]
    assert steps == [f"step {n}/6" for n in range(1, 7)]  # each once
    assert "starting at step 0" in lines and lines[-1] == "done"
    shown = cli("jobs", "show", job_id)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    rank.refresh_from_db()
    assert rank.node is not None
    for line in (
        f"ID:          {job_id}",
        "Status:      succeeded",
        "Exit code:   0",
        f"Cost so far: ¥{rank.cost_fen // 100}.{rank.cost_fen % 100:02d}",
    ):
        assert line in text.splitlines(), text
    assert f"0     {rank.node.name}" in text
    assert text.rstrip().endswith("Finished (exit code 0).")
    assert json_of(cli("jobs", "show", job_id, "--json"))["exit_code"] == 0
    kept = cli("jobs", "logs", job_id, "--tail", "1")
    assert (kept.returncode, kept.stdout) == (0, "done\n")  # kept after its pod went

    # a second job, by the offering's id, cancelled
    long = TRAINER.format(steps=400, seconds=0.05)
    second = json_of(
        cli("jobs", "submit", "--image", IMAGE, "--offering", offering.pk, "--json", "--", long)
    )
    other = _job_running(second["id"])
    asked = cli("jobs", "cancel", second["id"])  # no terminal: not asked, nothing done
    assert asked.returncode == 2
    cancelled = cli("jobs", "cancel", second["id"], "--yes")
    assert (cancelled.returncode, cancelled.stdout) == (0, f"{second['id']}: cancelling\n")
    assert converge_until(converge.terminate, other.pk) == "terminated"
    assert job_sync(second["id"]) == "cancelled"
    assert cli("jobs", "cancel", second["id"], "--yes").returncode == 6  # ended: a 409

    both = json_of(cli("jobs", "ls", "--json"))
    assert [(row["id"], row["status"]) for row in both] == [
        (second["id"], "cancelled"),
        (job_id, "succeeded"),
    ]
    only = json_of(cli("jobs", "ls", "--status", "succeeded", "--json"))
    assert [row["id"] for row in only] == [job_id]
    assert cli("jobs", "show", "job_doesnotexist").returncode == 4
