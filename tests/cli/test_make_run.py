"""The CLI against a live `make run`: the README's own command, started in a copy of this
checkout on free ports with its embedded defaults (the PostgreSQL it starts under var/, the
file-system broker, a real Celery worker and beat, gunicorn, the Kubernetes emulator with its
node agent and gateway, the Stripe stand-in) and MAKE_RUN_SSHD=1. Nothing of the test's process
serves it: every step goes over HTTP (and SSH) as a user's would; once stopped, it has left no
PostgreSQL running.

A new user signs up through the API, logs in with the CLI, adds an SSH key, tops up through the
stand-in's checkout page, `rent --wait` (make run's worker provisions the pod on the emulator),
`ssh` into it (make run's sshd for the pod: the images' real init with Debian's sshd, serving
the access Secret the worker wrote, on the node port the API gives), `stop --wait` (the sshd
goes with the pod), saves it as an image (the emulator pushes it to make run's docker-registry,
whose catalogue lists it), `rm -y`, deletes the image (gone from the registry too), and reads
the balance. sshd serves root logins only as root, as in
CI (.ci/run installs openssh-server)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devstack.podsshd import SSHD
from tests.cli.live import Cli, json_of, pay
from tests.devstack import listening
from tests.sshd import user_key

REPO = Path(__file__).resolve().parents[2]
OFFERING = "1× RTX 4090 24GB"
START_S = 240.0  # migrations, seeds and a dozen processes on a loaded 2-core CI machine
WAIT_S = 120.0  # make run's emulator pulls the image at IMAGE_PULL_BANDWIDTH_MBPS first
STOP_S = 60.0  # its trap waits for gunicorn's and Celery's graceful exits, then stops PostgreSQL
PASSWORD = "Make-run-2026-cli"
# What a copy of the checkout leaves out: the virtual environment is linked, the rest is made.
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "var", ".*_cache", "__pycache__", "*.pyc", "node_modules"
)


@dataclass
class MakeRun:
    url: str
    root: Path
    process: subprocess.Popen[bytes]

    def log(self) -> str:
        logs = [self.root / "make-run.log", *sorted((self.root / "var" / "log").glob("*.log"))]
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in logs
            if path.exists()
        )


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for each in sockets:
            each.bind(("127.0.0.1", 0))
        return [each.getsockname()[1] for each in sockets]
    finally:
        for each in sockets:
            each.close()


def _checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of this checkout, its virtual environment linked."""
    root = tmp_path_factory.mktemp("make-run") / "starverse"
    shutil.copytree(REPO, root, ignore=NOT_COPIED, symlinks=True)
    (root / ".venv").symlink_to(REPO / ".venv")
    return root


def _environment() -> dict[str, str]:
    """make run's environment on free ports, as the README's ports table names them."""
    port, kube, stripe, terminal, gateway, database, registry = _free_ports(7)
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    env = {key: os.environ[key] for key in keep if key in os.environ}
    env.update(
        PORT=str(port),
        KUBE_EMULATOR_PORT=str(kube),
        STRIPE_FAKE_PORT=str(stripe),
        TERMINAL_PORT=str(terminal),
        GATEWAY_PORT=str(gateway),
        EMBEDDED_PG_PORT=str(database),
        REGISTRY_PORT=str(registry),  # where docker-registry is installed (.ci/run does)
        KUBE_EMULATOR_FLEET="rtx4090=1",  # one node, one agent: the least make run serves
        LANG="C.UTF-8",
    )
    return env


@pytest.fixture(scope="module")
def make_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MakeRun]:
    assert os.geteuid() == 0, "make run's sshd (MAKE_RUN_SSHD=1) runs as root, as in CI"
    assert Path(SSHD).exists(), "sshd is missing: apt-get install openssh-server (.ci/run does)"
    root = _checkout(tmp_path_factory)
    env = _environment()
    env["MAKE_RUN_SSHD"] = "1"  # SSH into the emulated instances (devstack/podsshd.py)
    port = int(env["PORT"])
    with (root / "make-run.log").open("wb") as log:
        process = subprocess.Popen(
            ["make", "run"],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = MakeRun(f"http://127.0.0.1:{port}", root, process)
    try:
        deadline = time.monotonic() + START_S
        while not _answers(f"{server.url}/api/v1/offerings"):
            assert process.poll() is None, "make run exited:\n" + server.log()
            assert time.monotonic() < deadline, "make run did not serve:\n" + server.log()
            time.sleep(0.5)
        yield server
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        # make exits at once; make run's trap goes on and stops its PostgreSQL (in a session of
        # its own, which no signal to the group reaches) last, or nothing does
        database_left = _still_there(root / "var" / "postgres" / "postmaster.pid", STOP_S)
        _kill_left(root)
    assert not database_left, "make run left its PostgreSQL running:\n" + server.log()


def _command_line(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip().decode()


def test_a_taken_port_is_refused_before_anything_starts(tmp_path_factory):
    """A console port and an emulator port in use: make run names each, what holds it and the
    variable that moves it, and exits at once, having started nothing (no PostgreSQL made, no
    log written). It used to print its banner and die 24 s later with `Error 1`."""
    root = _checkout(tmp_path_factory)
    env = _environment()
    with socket.socket() as console, socket.socket() as emulator:
        console.bind(("127.0.0.1", int(env["PORT"])))
        console.listen()
        emulator.bind(("127.0.0.1", int(env["KUBE_EMULATOR_PORT"])))
        emulator.listen()
        done = subprocess.run(
            ["make", "--no-print-directory", "run"],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_S,
        )

    holder = _command_line(os.getpid())
    holder = holder if len(holder) <= 120 else holder[:119] + "…"
    said = [line for line in done.stderr.splitlines() if line.startswith("make run:")]
    assert said == [
        f"make run: port {env['PORT']} for the console is taken by pid {os.getpid()}: {holder}; "
        f"set PORT to move it (e.g. PORT={int(env['PORT']) + 100} make run).",
        f"make run: port {env['KUBE_EMULATOR_PORT']} for the Kubernetes emulator is taken by pid "
        f"{os.getpid()}: {holder}; set KUBE_EMULATOR_PORT to move it "
        f"(e.g. KUBE_EMULATOR_PORT={int(env['KUBE_EMULATOR_PORT']) + 100} make run).",
        "make run: nothing was started.",
    ]
    assert done.returncode == 2  # make's, for a recipe that failed
    assert "Starverse console:" not in done.stdout
    assert not (root / "var" / "postgres").exists()
    assert not (root / "var" / "log" / "stripe-fake.log").exists()


def test_the_console_answers_an_unknown_address_with_its_own_404_page(make_run):
    """make run's settings (starverse.settings.dev) run with DEBUG off: the console's page, not
    Django's technical one listing every route; static files are still served."""
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(f"{make_run.url}/console/no-such-page/", timeout=30)  # noqa: S310
    html = raised.value.read().decode()
    assert raised.value.code == 404
    assert "<title>Page not found · Starverse</title>" in html
    assert "URLconf" not in html
    css = f"{make_run.url}/static/css/console.css"
    with urllib.request.urlopen(css, timeout=30) as answer:  # noqa: S310 - make run's http://
        assert answer.status == 200


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - make run's http://
            return bool(answer.status == 200)
    except OSError:
        return False


def _still_there(path: Path, timeout: float) -> bool:
    """Whether `path` still exists after up to `timeout` seconds of waiting for it to go."""
    deadline = time.monotonic() + timeout
    while path.exists():
        if time.monotonic() > deadline:
            return True
        time.sleep(0.2)
    return False


def _kill_left(root: Path) -> None:
    """Whatever make run started and its trap missed (a node agent it restarts), by its cwd."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if Path(os.readlink(proc / "cwd")).is_relative_to(root):
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            continue


def _signup(base: str, email: str) -> None:
    request = urllib.request.Request(  # noqa: S310 - make run's http:// address
        f"{base}/api/v1/auth/signup",
        data=json.dumps({"email": email, "password": PASSWORD}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
        assert answer.status == 201


class _Api:
    """The API with the token `starverse login` saved (the CLI has no image commands)."""

    def __init__(self, base: str, config: Path) -> None:
        profiles = json.loads(config.read_text())["profiles"]
        self.base, self.token = base, next(iter(profiles.values()))["token"]

    def __call__(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(  # noqa: S310 - make run's http:// address
            f"{self.base}/api/v1{path}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            text = answer.read()
            return json.loads(text) if text else None


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 - make run's registry
        return json.loads(answer.read())


def _manifest_there(url: str) -> bool:
    request = urllib.request.Request(  # noqa: S310 - make run's registry
        url, headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except urllib.error.HTTPError as error:
        assert error.code == 404, error
        return False


def _until(cli: Cli, instance_id: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        shown: dict[str, Any] = json_of(cli("show", instance_id, "--json"))
        if shown["status"] == status:
            return shown
        assert time.monotonic() < deadline, f"still {shown['status']}, not {status}"
        time.sleep(0.5)


def test_rent_ssh_stop_and_remove_with_the_cli_against_make_run(make_run, tmp_path):
    cli = Cli(tmp_path / "home", make_run.url)
    assert cli("ls").returncode == 3  # no token yet

    email = f"cli-{os.getpid()}@lab.example.edu.cn"
    _signup(make_run.url, email)
    login = cli("login", "--email", email, "--password-stdin", stdin=PASSWORD + "\n")
    assert login.returncode == 0, login.stderr + make_run.log()
    laptop, laptop_public = user_key(tmp_path, "laptop")
    added = json_of(cli("keys", "add", f"{laptop}.pub", "--name", "laptop", "--json"))
    assert added["public_key"] == laptop_public

    # ¥100 through the Stripe stand-in, credited by make run's webhook
    topup = cli("topup", "100")
    assert topup.returncode == 0, topup.stderr
    pay(topup.stdout.strip())
    deadline = time.monotonic() + WAIT_S
    while json_of(cli("balance", "--json"))["cash_fen"] != 10_000:
        assert time.monotonic() < deadline, "the top-up was not credited:\n" + make_run.log()
        time.sleep(0.5)

    # rent --wait: make run's worker provisions the pod on the emulator
    rent = cli(
        "rent",
        OFFERING,
        "--image",
        "pytorch-2.1",
        "--name",
        "make-run-job",
        "--wait",
        "--json",
        timeout=WAIT_S,
    )
    assert rent.returncode == 0, rent.stderr + make_run.log()
    rented = json.loads(rent.stdout)
    assert rented["status"] == "running"
    assert rented["ssh"]["host_key_fingerprint"].startswith("SHA256:")
    listed = json_of(cli("ls", "--json"))
    assert [(item["id"], item["name"]) for item in listed] == [(rented["id"], "make-run-job")]

    # ssh with the host key pinned to the one the API gives, into the sshd make run's
    # MAKE_RUN_SSHD=1 runs for the pod (the images' init serving the Secret the worker wrote)
    port = rented["ssh"]["port"]
    deadline = time.monotonic() + WAIT_S
    while not listening(port):
        assert time.monotonic() < deadline, "no sshd for the instance:\n" + make_run.log()
        time.sleep(0.5)
    session = cli("ssh", rented["id"], "-i", str(laptop), "-o", "BatchMode=yes", "--", "id -un")
    assert session.returncode == 0, session.stderr + make_run.log()
    assert session.stdout == "root\n"
    pinned = (tmp_path / "home" / "starverse" / "known_hosts").read_text().split()
    assert pinned[0] == f"[127.0.0.1]:{port}"

    # stop --wait, then rm -y: the worker carries both through
    stop = cli("stop", rented["id"], "--wait", timeout=WAIT_S)
    assert stop.returncode == 0, stop.stderr + make_run.log()
    assert stop.stdout == f"{rented['id']}: stopped\n"
    assert cli("ssh", rented["id"]).returncode == 6
    deadline = time.monotonic() + WAIT_S
    while listening(port):  # the pod went: so does its sshd
        assert time.monotonic() < deadline, "the stopped instance's sshd still answers"
        time.sleep(0.5)
    # saved as an image: the emulator's crane append pushes it into make run's docker-registry
    api = _Api(make_run.url, tmp_path / "home" / "starverse" / "config.json")
    saved = api("POST", f"/instances/{rented['id']}/image", {"name": "make-run-env"})
    deadline = time.monotonic() + WAIT_S
    while (image := api("GET", f"/images/{saved['id']}"))["status"] == "saving":
        assert time.monotonic() < deadline, "the image was not saved:\n" + make_run.log()
        time.sleep(0.5)
    assert image["status"] == "ready", image
    registry = f"http://{image['reference'].split('/', 1)[0]}"
    repository, tag = image["reference"].split("/", 1)[1].rsplit(":", 1)
    assert repository.endswith("/make-run-env")
    assert repository in _get_json(f"{registry}/v2/_catalog")["repositories"]
    assert _get_json(f"{registry}/v2/{repository}/tags/list")["tags"] == [tag]

    removed = json_of(cli("rm", rented["id"], "-y", "--json"))
    assert removed["status"] in ("terminating", "terminated")
    _until(cli, rented["id"], "terminated")
    assert json_of(cli("ls", "--json")) == []
    # deleted, by make run's worker from the registry too
    manifest = f"{registry}/v2/{repository}/manifests/{tag}"
    assert _manifest_there(manifest)
    api("DELETE", f"/images/{saved['id']}")
    deadline = time.monotonic() + WAIT_S
    while _manifest_there(manifest):
        assert time.monotonic() < deadline, "the manifest is still there:\n" + make_run.log()
        time.sleep(0.5)

    # what it cost is on the balance, to the fen
    final = json_of(cli("balance", "--json"))
    cost = json_of(cli("show", rented["id"], "--json"))["cost_fen"]
    assert final["total_fen"] == 10_000 - cost  # no trial: the address was never verified
