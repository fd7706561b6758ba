"""SSH into `make run`'s emulated instances (opt-in: `MAKE_RUN_SSHD=1 make run`).

The emulator's pods run no process, so the address an instance's SSH gives (127.0.0.1 and its
Service's node port) answers nothing. This stand-in plays the container for SSH: for every
running instance pod on the emulator whose container runs the platform's entrypoint from the
init toolset an init container copied to the volume at /opt/starverse (as every instance pod
does, whatever its image), it runs that real entrypoint (deploy/images/init/bin/entrypoint,
which starts the init package, with Debian's sshd) in a scratch root on this machine, serving
the pod's access Secret as the kubelet would mount it (the platform's host key, the keys that
may log in, followed when they change), listening on 127.0.0.1 at the Service's node port;
when the pod goes, its init is stopped (SIGTERM: the on-stop hooks run) and its scratch root
removed.

A session is a root shell on THIS machine (the scratch root is only the init's view of the
container's files), so this is for a developer's own machine, never for a shared demo: it is
off unless asked for, listens on 127.0.0.1 only, and admits only the keys the platform wrote.
sshd's StrictModes wants every directory above the keys root-owned and not group- or
world-writable, so the scratch roots live under root's home, and this runs as root."""

from __future__ import annotations

import argparse
import base64
import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config

logger = logging.getLogger("devstack.podsshd")

INIT = Path(__file__).resolve().parents[1] / "deploy" / "images" / "init"
SSHD = "/usr/sbin/sshd"
INSTANCE_LABEL = "starverse.io/instance"
SSH_PORT = 22
# the platform's entrypoint and the init image's program (instances.provisioning.manifests)
TOOLS_DIR = "/opt/starverse"
ENTRYPOINT = f"{TOOLS_DIR}/bin/entrypoint"
TOOLS_PROGRAM = "starverse-tools-install"
# the init's view of the pod: what it would find in the container, below its scratch root
SCRATCH_ENV = ("STARVERSE_ROOT", "STARVERSE_SSH_PORT", "STARVERSE_SSH_LISTEN")


def access_write(access: Path, files: dict[str, str], version: int = 1) -> None:
    """Lay a Secret out as the kubelet mounts one: a versioned directory, `..data` pointing at
    it (swapped atomically on an update), each key a symlink through `..data`."""
    access.mkdir(parents=True, exist_ok=True)
    data = access / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}_v{version}"
    data.mkdir()
    for name, content in files.items():
        (data / name).write_text(content)
        (data / name).chmod(0o600)
    link = access / "..data_tmp"
    link.unlink(missing_ok=True)
    link.symlink_to(data.name)
    old = (access / "..data").resolve() if (access / "..data").is_symlink() else None
    os.replace(link, access / "..data")
    for name in files:
        if not (access / name).is_symlink():
            (access / name).symlink_to(f"..data/{name}")
    if old is not None and old != data:
        shutil.rmtree(old, ignore_errors=True)


def unsafe_parent(path: Path) -> Path | None:
    """The first directory at or above `path` that sshd's StrictModes refuses (not root's, or
    group- or world-writable), or None."""
    for directory in [path, *path.parents]:
        if not directory.exists():
            continue
        info = directory.stat()
        if info.st_uid != 0 or info.st_mode & 0o022:
            return directory
    return None


@dataclass
class Served:
    """One pod's init: its scratch root, its process and the Secret version it serves."""

    root: Path
    port: int
    secret_version: str
    process: subprocess.Popen[bytes]
    writes: int = 1


@dataclass
class PodSshd:
    api: Any  # kubernetes.client.CoreV1Api
    base: Path
    listen: str = "127.0.0.1"
    keys_poll_s: float = 2.0
    served: dict[str, Served] = field(default_factory=dict)

    def sync(self) -> None:
        """Start an init for every running instance pod that has none, hand each its Secret's
        changes, and stop those whose pod went."""
        pods = self.api.list_pod_for_all_namespaces(label_selector=INSTANCE_LABEL).items
        running = {
            f"{pod.metadata.namespace}/{pod.metadata.name}": pod
            for pod in pods
            if pod.status is not None
            and pod.status.phase == "Running"
            and pod.metadata.deletion_timestamp is None
            and runs_platform_entrypoint(pod)
        }
        for key in sorted(set(self.served) - set(running)):
            self.stop(key)
        for key, pod in sorted(running.items()):
            try:
                self._serve(key, pod)
            except client.ApiException as error:
                if error.status != 404:  # its Service or Secret not made yet: next pass
                    raise

    def _serve(self, key: str, pod: Any) -> None:
        namespace, name = key.split("/", 1)
        secret = self.api.read_namespaced_secret(f"{name}-access", namespace)
        served = self.served.get(key)
        if served is not None and served.process.poll() is None:
            if served.secret_version != secret.metadata.resource_version:
                served.writes += 1
                access_write(_access_dir(served.root), _decoded(secret), served.writes)
                served.secret_version = secret.metadata.resource_version
                logger.info("podsshd.keys_changed pod=%s", key)
            return
        if served is not None:  # its init exited: start it again
            logger.warning("podsshd.init_exited pod=%s code=%s", key, served.process.returncode)
            self.served.pop(key)
        service = self.api.read_namespaced_service(name, namespace)
        ports = [p.node_port for p in service.spec.ports or [] if p.port == SSH_PORT]
        if not ports or not ports[0]:
            return
        root = self.base / f"{namespace}.{name}"
        shutil.rmtree(root, ignore_errors=True)
        (root / "root" / "data").mkdir(parents=True)
        access_write(_access_dir(root), _decoded(secret), 1)
        tools = root / "opt" / "starverse"  # the toolset as the init container copied it
        (tools / "bin").mkdir(parents=True)
        (tools / "init").symlink_to(INIT)
        (tools / "bin" / "entrypoint").symlink_to(INIT / "bin" / "entrypoint")
        env = {
            **_pod_env(pod),
            "PATH": "/usr/sbin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "STARVERSE_TOOLS": str(tools),
            "STARVERSE_SSHD": SSHD,  # Debian's: the toolset's own is built for containers
            "STARVERSE_TERMINATION_LOG": str(root / "termination-log"),
            "STARVERSE_ROOT": str(root),
            "STARVERSE_SSH_PORT": str(ports[0]),
            "STARVERSE_SSH_LISTEN": self.listen,
            "STARVERSE_KEYS_POLL_S": str(self.keys_poll_s),
        }
        with (root / "init.log").open("ab") as log:
            process = subprocess.Popen(  # noqa: S603 - the repository's own entrypoint
                [str(tools / "bin" / "entrypoint")],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        self.served[key] = Served(root, ports[0], secret.metadata.resource_version, process)
        logger.info("podsshd.started pod=%s port=%s root=%s", key, ports[0], root)

    def stop(self, key: str) -> None:
        served = self.served.pop(key)
        if served.process.poll() is None:
            os.killpg(served.process.pid, signal.SIGTERM)
            try:
                served.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(served.process.pid, signal.SIGKILL)
                served.process.wait()
        shutil.rmtree(served.root, ignore_errors=True)
        logger.info("podsshd.stopped pod=%s", key)

    def close(self) -> None:
        for key in list(self.served):
            self.stop(key)


def runs_platform_entrypoint(pod: Any) -> bool:
    """Whether the pod's first container runs the platform's entrypoint from a volume at
    TOOLS_DIR that one of its init containers filled with the toolset: only such a container
    has the platform's init (and so SSH) to play."""
    containers = pod.spec.containers or []
    if not containers or list(containers[0].command or []) != [ENTRYPOINT]:
        return False
    volumes = {m.name for m in containers[0].volume_mounts or [] if m.mount_path == TOOLS_DIR}
    return any(
        str((init.command or [""])[0]).rsplit("/", 1)[-1] == TOOLS_PROGRAM
        and volumes & {m.name for m in init.volume_mounts or []}
        for init in pod.spec.init_containers or []
    )


def _access_dir(root: Path) -> Path:
    return root / "etc" / "starverse" / "access"


def _decoded(secret: Any) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in (secret.data or {}).items()}


def _pod_env(pod: Any) -> dict[str, str]:
    """The literal environment the platform gave the pod's first container (the instance's
    id, the console's address …), as the init would see it; nothing that names a path."""
    containers = pod.spec.containers or []
    env = (containers[0].env or []) if containers else []
    return {
        item.name: item.value
        for item in env
        if item.value is not None and item.name not in SCRATCH_ENV and item.name != "PATH"
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.podsshd", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, help="the emulator's kubeconfig")
    parser.add_argument(
        "--root",
        default=str(Path("~root").expanduser() / ".cache" / "starverse" / "pod-sshd"),
        help="where the pods' scratch roots go (every parent root's and not group-writable)",
    )
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between passes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if os.geteuid() != 0:
        logger.error("podsshd: sshd serves root logins only when run as root; run make run as root")
        return 2
    if not os.path.exists(SSHD):
        logger.error("podsshd: %s is missing: apt-get install openssh-server", SSHD)
        return 2
    base = Path(args.root)
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    unsafe = unsafe_parent(base)
    if unsafe is not None:
        logger.error("podsshd: sshd refuses keys below %s (group- or world-writable)", unsafe)
        return 2
    api = client.CoreV1Api(config.new_client_from_config(args.kubeconfig))
    pods = PodSshd(api, base)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    logger.info("podsshd: serving SSH of the emulator's instance pods on 127.0.0.1")
    try:
        while not stopping:
            try:
                pods.sync()
            except (client.ApiException, OSError) as error:  # the emulator restarting
                logger.warning("podsshd.sync_failed error=%s", error)
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    finally:
        pods.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
