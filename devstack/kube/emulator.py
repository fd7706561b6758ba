"""``KubeEmulator``: a local Kubernetes API emulator for development and tests.

It is a development stand-in for a cluster of GPU nodes — an HTTP server on 127.0.0.1 that the
official ``kubernetes`` client and ``kubectl`` talk to unchanged — and never a way to run
production workloads: nothing is executed, pods only walk through their lifecycle on paper
(except the simulated trainer, :mod:`.trainer`, which the kubelets play, with its log and exit
code), volumes keep files in a directory each under ``data_dir`` (:mod:`.volumedata`), and exec
into a pod reaches a simulated shell (:mod:`.shell`).

    emu = KubeEmulator(pull_delay_s=0.05, start_delay_s=0.05).start()
    emu.write_kubeconfig("var/kubeconfig")
    ...
    emu.stop()

The same address stands in for the cluster's Service network: a request whose Host names a
Service (``<service>.<namespace>.svc.cluster.local:<port>``, see ``service_host``) is answered by
a stand-in page of the pod behind it (:mod:`.network`), which is what the development gateway
routes to.

Given ``users`` (bearer token → ``User``), it authenticates and authorizes every request with
RBAC from the Roles, ClusterRoles and bindings it stores (:mod:`.rbac`); without, any token (or
none) may do anything, as before.

Beyond pods, Services and claims it runs what inference endpoints need: Deployments and
ReplicaSets (:mod:`.workloads`), pods of other schedulers left for their Binding
(:mod:`.scheduler`), CSI VolumeSnapshots and restores (:mod:`.snapshots`), an OpenAI-compatible
engine stand-in on the Service network (:mod:`.engine`, with ``crash_container``) and the KEDA
HTTP add-on (:mod:`.keda`, reading in-flight counts from ``keda_queue_url``).

Tests drive it deterministically: ``step(seconds)`` moves its clock and runs one pass of the
control plane and kubelets synchronously, ``paused()`` stops its own loop and clock for a block,
and ``reset()`` takes a running emulator back to its seeded cluster for the next test.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from .api import Api
from .controllers import Controllers
from .daemonsets import DaemonSetController
from .fleet import NodeSpec, build_fleet, lease_object, node_object
from .images import DEFAULT_BANDWIDTH_MBPS, ImageCatalog, add_image
from .keda import KedaStandIn
from .kubelet import Kubelet
from .network import ServiceNetwork
from .persistence import StateDir
from .podexec import ExecSession
from .rbac import Authorizer, User
from .resources import (
    ALL_RESOURCES,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    SERVICES,
    VOLUME_SNAPSHOT_CLASSES,
)
from .scheduler import Scheduler
from .server import EmulatorHTTPServer, Fault, FaultInjector, ServerContext
from .shell import ReplacedProgram
from .snapshots import Snapshots, default_class_object
from .stats import NodeProxy
from .store import Obj, Store
from .validation import Validator, schema_version
from .volumedata import VolumeData
from .volumes import VolumeResizer
from .workloads import Workloads

log = logging.getLogger("devstack.kube")
SEED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
DEV_TOKEN = "starverse-kube-emulator-dev-token"  # noqa: S105 - any token (or none) is accepted


class KubeEmulator:
    """Development stand-in for a Kubernetes cluster of GPU nodes (not for production)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        nodes: list[NodeSpec] | None = None,
        pull_delay_s: float = 0.5,
        start_delay_s: float = 0.2,
        tick_s: float = 0.05,
        validate: bool = True,
        *,
        fleet: dict[str, int] | None = None,
        history_size: int = 1000,
        pod_termination_s: float = 0.2,
        eviction_grace_s: float = 30.0,
        bookmark_interval_s: float = 1.0,
        max_watch_s: float = 1800.0,
        seed: int | None = None,
        users: dict[str, User] | None = None,
        node_prefix: str = "",
        image_sizes: dict[str, int] | None = None,
        default_image_bytes: int = 0,
        pull_bandwidth_mbps: float = DEFAULT_BANDWIDTH_MBPS,
        registry_bandwidth_mbps: float | None = None,
        registry_url: str | None = None,
        snapshot_ready_s: float = 0.5,
        standin_latency_ms: float | None = None,
        standin_load_s: float | None = None,
        keda_queue_url: str | None = None,
        keda_polling_interval_s: float | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        lease_renew_s: float = 10.0,
    ) -> None:
        self.host = host
        self.port = port
        self.tick_s = tick_s
        self.node_specs = list(nodes) if nodes is not None else build_fleet(fleet, node_prefix)
        self.store = Store(history_size)
        self.api = Api(self.store, Validator(schema=validate), seed)
        # Image sizes default to 0 B, so a pull takes only pull_delay_s unless sizes are given.
        self.images = ImageCatalog(
            image_sizes or {},
            default_image_bytes,
            pull_bandwidth_mbps,
            registry_bandwidth_mbps,
            registry_url=registry_url,
        )
        # its objects kept on disk (:mod:`.persistence`), loaded when an earlier run left them
        self.state = StateDir(state_dir) if state_dir is not None else None
        self.restored = self.state is not None and self.state.exists
        # volumes' files: under data_dir, else a temporary directory removed at stop; kept when
        # the objects were restored (their claims are)
        self.volume_data = VolumeData(self.store, data_dir, keep=self.restored)
        self.kubelet = Kubelet(
            self.api,
            pull_delay_s,
            start_delay_s,
            pod_termination_s,
            self.volume_data,
            self.images,
            load_s=_setting(standin_load_s, "STARVERSE_STANDIN_LOAD_S"),
            lease_renew_s=lease_renew_s,
        )
        self.scheduler = Scheduler(self.api)
        self._clock_lock = threading.Lock()
        self._clock_offset = 0.0  # seconds step() added to the monotonic clock
        self._paused_at: float | None = None  # the clock's reading while paused
        self.controllers = Controllers(self.api, self.kubelet, eviction_grace_s, self.now)
        self.resizer = VolumeResizer(self.api)
        self.daemonsets = DaemonSetController(self.api)
        self.workloads = Workloads(self.api)
        self.snapshots = Snapshots(self.api, snapshot_ready_s)
        self.keda = KedaStandIn(
            self.api,
            keda_queue_url or os.environ.get("KUBE_EMULATOR_KEDA_QUEUE_URL") or None,
            keda_polling_interval_s or _setting(None, "KUBE_EMULATOR_KEDA_POLLING_INTERVAL") or 1.0,
        )
        self.node_proxy = NodeProxy(self.store, lambda node: node in self.kubelet.frozen_nodes)
        self.faults = FaultInjector()
        version = schema_version()
        major, minor = version.split(".")[:2]
        self.kubernetes_version = f"v{version}-starverse-emulator"
        self.version_info: dict[str, Any] = {
            "major": major,
            "minor": minor,
            "emulationMajor": major,
            "emulationMinor": minor,
            "gitVersion": self.kubernetes_version,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "goVersion": "n/a (Python kube emulator: development stand-in, not for production)",
            "compiler": "starverse-kube-emulator",
            "platform": "linux/amd64",
        }
        self._ctx = ServerContext(
            self.api,
            self.faults,
            self.version_info,
            bookmark_interval_s,
            max_watch_s,
            self.node_proxy,
            authorizer=Authorizer(self.store, users) if users else None,
            network=ServiceNetwork(
                self.store, _setting(standin_latency_ms, "STARVERSE_STANDIN_LATENCY_MS")
            ),
            logs=self.kubelet.logs,
            volume_data=self.volume_data,
        )
        self._server: EmulatorHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._seed_cluster()
        self._seeded = {key: copy.deepcopy(obj) for key, obj in self.store.everything().items()}
        if self.state is not None:
            if self.restored:
                self.store.restore(*self.state.load())
            self.state.attach(self.store)

    # --- lifecycle ---------------------------------------------------------------------------

    def _seed_cluster(self) -> None:
        for name in SEED_NAMESPACES:
            self.api.create_internal(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
        self.api.create_internal(
            SERVICES,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": "kubernetes",
                    "namespace": "default",
                    "labels": {"component": "apiserver", "provider": "kubernetes"},
                },
                "spec": {
                    "clusterIP": "10.96.0.1",
                    "ports": [
                        {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}
                    ],
                },
            },
        )
        self.api.create_internal(VOLUME_SNAPSHOT_CLASSES, default_class_object())
        for index, spec in enumerate(self.node_specs):
            node = self.api.create_internal(
                NODES, node_object(spec, index, self.kubernetes_version)
            )
            self.api.create_internal(LEASES, lease_object(spec.name, node["metadata"]["uid"]))

    def start(self) -> KubeEmulator:
        if self._server is not None:
            return self
        self._server = EmulatorHTTPServer((self.host, self.port), self._ctx)
        self.port = self._server.server_address[1]
        self._stopping.clear()
        self.kubelet.logs.closed = False
        serve = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="kube-emulator-http",
            daemon=True,
        )
        loop = threading.Thread(target=self._loop, name="kube-emulator-sim", daemon=True)
        poller = threading.Thread(target=self._poll_keda, name="kube-emulator-keda", daemon=True)
        self._threads = [serve, loop, poller]
        for thread in self._threads:
            thread.start()
        log.info(
            "kube-emulator started url=%s nodes=%d note=%s",
            self.url,
            len(self.node_specs),
            json_quote("development stand-in, not a real cluster"),
        )
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()
        self.store.close()
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()
        self.kubelet.logs.close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._server = None
        if self.state is not None:
            self.state.close()
        self.volume_data.close()
        log.info("kube-emulator stopped url=%s", self.url)

    def __enter__(self) -> KubeEmulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stopping.wait(self.tick_s):
            with self.store.lock:
                if self._paused_at is None:
                    self.tick()

    def _poll_keda(self) -> None:
        """Read the KEDA stand-in's in-flight counts, outside the store's lock."""
        while not self._stopping.wait(self.keda.polling_interval_s):
            self.keda.refresh()

    def tick(self) -> None:
        """One pass of the emulated control plane and kubelets (the loop calls this)."""
        # one pass is atomic with respect to API requests and fault calls (lose_node, ...)
        with self.store.lock:
            now = self.now()
            for part in (
                self.volume_data,
                self.controllers,
                self.daemonsets,
                self.workloads,
                self.scheduler,
                self.kubelet,
                self.resizer,
                self.snapshots,
                self.keda,
            ):
                try:
                    part.tick(now)
                except Exception:  # keep the loop alive; the log names the failing component
                    log.exception("kube-emulator %s tick failed", type(part).__name__)

    # --- driving it from a test -------------------------------------------------------------

    def now(self) -> float:
        """The emulated clock (monotonic seconds) the control plane and kubelets run on: real
        time plus what ``step`` added, standing still while ``paused``."""
        with self._clock_lock:
            if self._paused_at is not None:
                return self._paused_at
            return time.monotonic() + self._clock_offset

    def step(self, seconds: float = 0.0) -> None:
        """Move the emulated clock ``seconds`` forward, then run one pass of the control plane
        and kubelets before returning (a pass moves each pod on by at most one stage)."""
        if seconds < 0:
            raise ValueError("the emulated clock only moves forward")
        with self.store.lock:
            with self._clock_lock:
                if self._paused_at is not None:
                    self._paused_at += seconds
                else:
                    self._clock_offset += seconds
            self.tick()

    @contextlib.contextmanager
    def paused(self) -> Iterator[KubeEmulator]:
        """Within the block the emulator's own loop does not run and its clock stands still:
        only ``step`` moves them, so a test can show that something did not happen after a
        given number of passes and seconds, however slow the machine. API requests are served
        as usual."""
        with self.store.lock, self._clock_lock:
            if self._paused_at is not None:
                raise RuntimeError("the kube emulator is already paused")
            self._paused_at = time.monotonic() + self._clock_offset
        try:
            yield self
        finally:
            with self.store.lock, self._clock_lock:
                assert self._paused_at is not None
                self._clock_offset = self._paused_at - time.monotonic()  # the clock goes on
                self._paused_at = None

    @property
    def open_watches(self) -> int:
        """How many watch streams the server is serving now."""
        with self._ctx.lock:
            return self._ctx.watches

    @property
    def exec_sessions(self) -> list[ExecSession]:
        """The exec sessions (``pods/{name}/exec``) whose connection is open now."""
        return self._ctx.execs.sessions()

    @property
    def exec_sessions_total(self) -> int:
        """How many exec sessions have been opened since the emulator started."""
        return self._ctx.execs.total

    @property
    def requests_total(self) -> int:
        """How many API requests the server has received since it started (requests to
        Services' ports on the emulated pod network are not API requests)."""
        with self._ctx.lock:
            return self._ctx.requests_total

    def requests_since(self, mark: int) -> list[tuple[str, str]]:
        """(method, path) of the API requests received after the first ``mark`` (a
        ``requests_total`` read earlier), oldest first; only the latest 1,000 are kept."""
        with self._ctx.lock:
            newer = self._ctx.requests_total - mark
            return list(self._ctx.request_log)[-newer:] if newer > 0 else []

    def reset(self) -> None:
        """Take the running emulator back to its seeded cluster, so that one emulator can serve
        test after test: objects created since are removed (watches see them deleted), seeded
        objects that changed get their seeded content back (nodes uncordoned, healthy and
        untainted), and injected faults, failing images, lost nodes, volume usage, replaced
        programs and the kubelets' pods are forgotten. resourceVersions and the clock keep
        counting."""
        by_key = {rt.key: rt for rt in ALL_RESOURCES}
        with self.store.lock:
            self.faults.clear()
            with self._ctx.lock:
                self._ctx.replaced.clear()
                self._ctx.written.clear()
            self.kubelet.reset()
            self.volume_data.clear()
            self.images.reset()
            self.scheduler.reset()
            self.controllers.reset()
            self.workloads.reset()
            self.snapshots.reset()
            self.keda.reset()
            self.node_proxy.clear_volume_usage()
            self.api.events.forget()
            current = self.store.everything()
            for key, obj in current.items():
                seeded = self._seeded.get(key)
                if seeded is None:
                    self.store.remove(by_key[key[0]], obj)
                elif _without_version(obj) != _without_version(seeded):
                    self.store.replace(by_key[key[0]], copy.deepcopy(seeded))
            for key, seeded in self._seeded.items():
                if key not in current:
                    self.store.add(by_key[key[0]], copy.deepcopy(seeded))

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def service_host(self, namespace: str, service: str, port: int) -> str:
        """The Host header that reaches a Service's port through this emulator's stand-in of
        the pod network (:mod:`.network`), as cluster DNS names it."""
        return f"{service}.{namespace}.svc.cluster.local:{port}"

    def apply(self, objects: list[Obj]) -> list[Obj]:
        """Create objects of kinds the emulator serves (a manifest file's RBAC objects, say) as
        the cluster's administrator would, validated but past any authorization; returns them
        as stored."""
        by_kind = {(rt.api_version, rt.kind): rt for rt in ALL_RESOURCES}
        created = []
        for obj in objects:
            rt = by_kind.get((obj.get("apiVersion", ""), obj.get("kind", "")))
            if rt is None:
                raise ValueError(f"the kube emulator does not serve {obj.get('kind')!r}")
            namespace = (obj.get("metadata") or {}).get("namespace") or ""
            stored, _warnings = self.api.create(rt, namespace, copy.deepcopy(obj))
            created.append(stored)
        return created

    def write_kubeconfig(
        self,
        path: str | os.PathLike[str],
        context: str = "starverse-emulator",
        token: str = DEV_TOKEN,
    ) -> Path:
        """Write a kubeconfig pointing at this emulator (plain http, static bearer token: with
        ``users``, the token of the user to act as)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = (
            "# Starverse kube emulator: a development stand-in, not a real cluster.\n"
            "apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            f"- name: {context}\n"
            "  cluster:\n"
            f"    server: {self.url}\n"
            "users:\n"
            f"- name: {context}\n"
            "  user:\n"
            f"    token: {token}\n"
            "contexts:\n"
            f"- name: {context}\n"
            "  context:\n"
            f"    cluster: {context}\n"
            f"    user: {context}\n"
            "    namespace: default\n"
            f"current-context: {context}\n"
            "preferences: {}\n"
        )
        target.write_text(text)
        target.chmod(0o600)
        return target

    # --- fault injection ---------------------------------------------------------------------

    def inject_api_fault(
        self,
        status: int = 500,
        count: int = 1,
        verb: str | None = None,
        resource: str | None = None,
        retry_after_s: int = 1,
    ) -> None:
        """Answer the next ``count`` matching API requests with ``status`` (500, 429, ...).

        ``verb`` is a Kubernetes verb (get, list, watch, create, update/replace, patch, delete,
        deletecollection); ``resource`` a plural such as ``pods`` or ``pods/status``. A 429
        carries ``Retry-After`` (urllib3 retries idempotent verbs on it by itself)."""
        if verb is not None:
            verb = {"replace": "update", "read": "get"}.get(verb, verb)
        self.faults.add(Fault(status, count, verb, resource, retry_after_s))

    def clear_api_faults(self) -> None:
        self.faults.clear()

    def fail_image_pull(self, image_substring: str) -> None:
        """Pods whose image contains ``image_substring`` go ErrImagePull → ImagePullBackOff."""
        self.kubelet.failing_images.append(image_substring)

    def clear_image_pull_failures(self) -> None:
        self.kubelet.failing_images.clear()

    def fail_container_start(self, image_substring: str, message: str) -> None:
        """The runtime cannot run the first container of pods whose image contains
        ``image_substring`` (an image without /bin/sh, or built for another CPU): its status is
        ``terminated`` with reason ``StartError``, exit code 128 and ``message``, as containerd
        reports it, and the pod stays Pending. Played on init containers, which run first."""
        self.kubelet.failing_starts[image_substring] = message

    def fail_container_exit(self, image_substring: str, code: int, message: str) -> None:
        """The main containers of pods whose image contains ``image_substring`` exit with
        ``code`` and the termination ``message`` each time they start (a crash loop), as the
        platform's entrypoint does in an image it cannot start."""
        self.kubelet.exiting_images[image_substring] = (code, message)

    def lose_node(self, name: str) -> None:
        """The node stops reporting: Ready=Unknown, unreachable taints, its pods NotReady
        (NodeLost) and, after ``eviction_grace_s``, evicted."""
        self.controllers.lose_node(name)

    def restore_node(self, name: str) -> None:
        self.controllers.restore_node(name)

    def crash_container(self, namespace: str, pod: str, container: str | None = None) -> None:
        """A running pod's container (every one unless named) exits with an error once:
        restartCount + 1, CrashLoopBackOff and not Ready for a moment, then Running again
        (an endpoint pod loads its model again before it is Ready)."""
        with self.store.lock:
            self.kubelet.crash(namespace, pod, self.now(), container)

    def replace_program(
        self,
        namespace: str,
        pod: str,
        path: str,
        *,
        prints: str = "",
        exit_code: int = 0,
        hangs: bool = False,
    ) -> None:
        """What a tenant, root in its container, can do to any file of the container's
        writable layer: the program at ``path`` (absolute) in the pod's container, run by exec,
        from now on prints ``prints`` and exits with ``exit_code`` or, ``hangs``, never ends
        (until the exec's client goes away). Kept for this pod (its uid: a pod made again
        starts clean) until ``reset``."""
        uid = self.api.get(PODS, namespace, pod)["metadata"]["uid"]
        with self._ctx.lock:
            programs = self._ctx.replaced.setdefault(uid, {})
            programs[path] = ReplacedProgram(prints, exit_code, hangs)

    def container_file(self, namespace: str, pod: str, path: str) -> str | None:
        """What exec wrote to the file ``path`` of the pod's container (``echo … > path``),
        or None; a pod that is gone (or made again) has written nothing."""
        found = self.api.store.get(PODS, namespace, pod)
        if found is None:
            return None
        with self._ctx.lock:
            return self._ctx.written.get(found["metadata"]["uid"], {}).get(path)

    def set_pull_delay(self, seconds: float) -> None:
        self.kubelet.pull_delay_s = seconds

    def set_image_size(self, reference: str, size_bytes: int) -> None:
        """What the emulated registry says an image weighs (pulls from now on take it)."""
        self.images.set_size(reference, size_bytes)

    def set_registry(self, url: str | None) -> None:
        """A real registry (``http://host:port``) the emulated ``crane append`` pushes saved
        images to from now on, as well as recording them in the model (:mod:`.saving`); None:
        the model only. ``reset`` goes back to the one given at start."""
        self.images.registry_url = url

    def preload_image(self, node_name: str, reference: str) -> None:
        """The node holds the image already (pulled before), as listed in its status.images."""
        size = self.images.size(reference)
        with self.store.lock:
            if (
                self.api.mutate(NODES, "", node_name, lambda n: add_image(n, reference, size))
                is None
            ):
                raise ValueError(f"no node {node_name!r}")

    def set_keda_queue_url(self, url: str | None) -> None:
        """Where the KEDA stand-in reads in-flight counts per host (:mod:`.keda`); ``reset``
        goes back to the configured one."""
        self.keda.queue_url = url
        self.keda.refresh()

    def set_volume_usage(self, namespace: str, claim: str, used_bytes: int) -> None:
        """Bytes in use on a claim's volume, as the kubelet Summary API
        (``nodes/{node}/proxy/stats/summary``) reports them for pods that mount it (0 until
        set: the files in the volume's directory are not measured)."""
        self.node_proxy.set_volume_usage(namespace, claim, used_bytes)


def _setting(value: float | None, env: str) -> float:
    """A stand-in setting: the argument, else the emulator process's environment, else 0."""
    if value is not None:
        return value
    try:
        return float(os.environ.get(env) or 0)
    except ValueError:
        log.warning("kube-emulator ignores a non-numeric setting env=%s", env)
        return 0.0


def _without_version(obj: Obj) -> Obj:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


def json_quote(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'
