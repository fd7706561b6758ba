"""Gateway benchmark: gateway_proxy, requests/s to an instance's port through the development
gateway (the console's authorization check under gunicorn, then the route the worker made, to
the pod's stand-in on the kube emulator), next to requests/s straight to that stand-in, in the
same run. The gateway keeps a check's 2xx for 2 s per address and cookie (devstack.gateway)."""

import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from bench.common import database_url, recreate_database, report, setup_django
from bench.instances import ROOT, _load, _users


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(port: int, host: str = "127.0.0.1") -> None:
    for _ in range(150):
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {host}:{port}")


def _spawn(*module_and_args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", *module_and_args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def gateway_proxy() -> dict:
    from django.core.management import call_command
    from django.test import override_settings

    from compute.models import Offering
    from fleet.services import nodes_sync_from_cluster
    from instances.gateway import cookie_name, gateway_login_target, port_host
    from instances.lifecycle import instance_order
    from instances.provisioning import converge
    from starverse.core import kube

    kube_port, web_port, gateway_port = _free_port(), _free_port(), _free_port()
    domain = f"localhost:{gateway_port}"
    kubeconfig = Path(tempfile.mkdtemp()) / "kubeconfig"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        "DATABASE_URL": database_url(),
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/1"),
        "GATEWAY_DOMAIN": domain,
        "PUBLIC_BASE_URL": f"http://127.0.0.1:{web_port}",
        "KUBE_ACCESS": "false",
    }
    processes = [
        _spawn(
            *("devstack.kube", "--port", str(kube_port), "--kubeconfig", str(kubeconfig)),
            *("--fleet", "h100=1", "--log-level", "WARNING", "--pull-delay", "0"),
            env=env,
        )
    ]
    try:
        _wait(kube_port)
        for _ in range(100):
            if kubeconfig.exists():
                break
            time.sleep(0.05)
        with override_settings(
            KUBECONFIG=str(kubeconfig),
            GATEWAY_DOMAIN=domain,
            CELERY_TASK_ALWAYS_EAGER=False,
        ):
            kube._api_client.cache_clear()
            call_command("seed_catalog", verbosity=0)
            nodes_sync_from_cluster()
            user = _users(1, prefix="g")[0]
            offering = Offering.objects.get(name="1× H100 80GB SXM")
            instance, _ = instance_order(
                user=user, offering_id=offering.id, image_id="pytorch-2.1", ports=[6006]
            )
            while True:
                try:
                    if converge.provision(instance.id) == "running":
                        break
                except converge.StillPending:
                    time.sleep(0.05)
            instance.refresh_from_db()
            host = port_host(instance.id, 6006)
            hop = urlsplit(gateway_login_target(user=user, next_url=f"http://{host}/"))
            kube._api_client.cache_clear()
        processes.append(
            _spawn(
                *("gunicorn", "bench.wsgi:application", "--bind", f"127.0.0.1:{web_port}"),
                *("--workers", "2", "--threads", "2", "--log-level", "warning"),
                env=env,
            )
        )
        processes.append(
            _spawn(
                *("devstack.gateway", "--port", str(gateway_port), "--log-level", "WARNING"),
                *("--auth-url", f"http://127.0.0.1:{web_port}/gateway/auth"),
                *("--kube-url", f"http://127.0.0.1:{kube_port}"),
                env=env,
            )
        )
        _wait(web_port)
        _wait(gateway_port)
        conn = http.client.HTTPConnection("127.0.0.1", gateway_port, timeout=10)
        conn.request("GET", f"{hop.path}?{hop.query}", headers={"Host": host})
        answer = conn.getresponse()
        answer.read()
        cookie = answer.getheader("Set-Cookie", "").split(";")[0]
        assert answer.status == 302 and cookie.startswith(cookie_name() + "="), answer.status
        through = [("/", {"Host": host, "Cookie": cookie})]
        service = f"{instance.k8s_name}-p6006.{instance.k8s_namespace}.svc.cluster.local:6006"
        straight = [("/", {"Host": service})]
        _load(gateway_port, through, 1.0)  # warm up
        # in turns, so that the machine's other work weighs on both alike
        rounds = [(_load(gateway_port, through, 2.0), _load(kube_port, straight, 2.0))]
        rounds += [(_load(gateway_port, through, 2.0), _load(kube_port, straight, 2.0))]
        rounds += [(_load(gateway_port, through, 2.0), _load(kube_port, straight, 2.0))]
        rounds += [(_load(gateway_port, through, 2.0), _load(kube_port, straight, 2.0))]
        ours = sum(r[0] for r in rounds) / len(rounds)
        baseline = sum(r[1] for r in rounds) / len(rounds)
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=10)
    return report(
        "gateway_proxy",
        ours,
        "req/s",
        baseline,
        "the same page straight from the pod's stand-in, no gateway",
        "ratio >= 0.5",
    )


def run() -> list[dict]:
    recreate_database()
    setup_django()
    return [gateway_proxy()]
