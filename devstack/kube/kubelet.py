"""Emulated kubelets of the Kubernetes API emulator (a development stand-in).

For every pod bound to a Ready node: admission (``OutOf<resource>`` when the node lacks room),
then volume setup — while a ``persistentVolumeClaim`` is missing, being deleted or unbound
(``FailedMount``) or is a ReadWriteOnce claim in use on another node (``FailedAttachVolume``:
``Multi-Attach error``), the pod waits in ``ContainerCreating``, retried every tick, the warning
repeated at most every ``MOUNT_WARNING_S`` seconds — then ``Pulling`` → ``Pulled`` (or
``ErrImagePull`` / ``ImagePullBackOff`` for images named by ``fail_image_pull``) → ``Created`` /
``Started`` → phase Running with Ready conditions, a pod IP and running container statuses.
Init containers run to their end first, in order: the init image's program copies the
platform's toolset into its volume, the system-disk seeding program copies its image's
directories (:mod:`.seeding`), the save-layer program makes a saved image's layer
(:mod:`.saving`), anything else succeeds at once; a container whose command is a path on one
of its volumes with no such file there cannot start (``StartError``); one that fails leaves
the pod Pending with its ``terminated`` status and a ``BackOff`` warning.
A pod labelled ``starverse.io/endpoint`` runs but is Ready only after its model-load time
(``STARVERSE_STANDIN_LOAD_S``: its env, else the emulator's setting), and ``crash`` makes a
running container exit once (restartCount + 1, CrashLoopBackOff, not Ready) and start again.
A pod whose env has ``STARVERSE_STANDIN_EXIT`` (``<code>`` or ``<code>:<message>``) has its
containers exit with that code and termination message each time they start (a crash loop),
as an engine image's entry point does on a missing model.
Deleted pods get ``Killing`` events and are removed after a short grace. Nothing runs:
containers are status only, except the simulated trainer (:mod:`.trainer`), which the kubelet
plays on its clock, reading and writing the pod's volumes (:mod:`.volumedata`).

A container that exits is handled by the pod's ``restartPolicy``: ``Always`` restarts it, as
does ``OnFailure`` after a non-zero exit (CrashLoopBackOff, the previous instance kept as
``lastState``); otherwise it stays ``terminated`` (``Completed`` or ``Error``, with the last
lines of its log as the message under ``FallbackToLogsOnError``), and once every container has
terminated the pod is ``Succeeded`` (all exited 0) or ``Failed``, which frees its requests on
the node. Each container instance's output is kept in the :class:`.podlogs.LogBook` under its
``containerID`` (the banner line for a container that runs nothing).

The image stage takes the fixed ``pull_delay_s`` plus, for each image the node does not hold
yet (or whose ``imagePullPolicy`` is ``Always``), its size ÷ the node's pull bandwidth
(:mod:`.images`); a pulled image is listed in the node's ``status.images`` and is already
present for the next pod.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .api import Api
from .defaults import now_iso, pod_requests
from .engine import load_seconds, standin_exit
from .images import ImageCatalog, Pull, Pulls, add_image, holds, node_bandwidth_mbps
from .objects import TERMINAL, set_condition
from .podlogs import LogBook
from .resources import LEASES, NODES, PODS, ResourceType
from .saving import PushRun, layer_args, push, save_layer
from .scheduler import allocatable, describe_shortage, node_usage
from .seeding import missing_command, seed, tools_install, tools_target
from .trainer import (
    GATE_ENV,
    USAGE_EXIT,
    BadArgs,
    TrainerRun,
    container_env,
    start_run,
    trainer_args,
)
from .volumedata import VolumeData
from .volumes import VolumeBlock, attach_block, mount_block

Obj = dict[str, Any]
GATE_POLL_S = 0.2  # how often a program waiting for its gate file looks for it
MOUNT_WARNING_S = 2.0  # how often a pod still waiting for its volumes repeats the warning
# what the kubelet copies from the log under FallbackToLogsOnError
MESSAGE_LINES, MESSAGE_BYTES = 80, 2048
# what the kubelet's writes change besides metadata (Api.mutate copies only these)
_STATUS = ("status",)


@dataclass
class PodSim:
    stage: str  # mounting, pulling, pull_error, init_failed, backoff, starting, running, killing
    due: float
    node: str
    backoff_s: float = 0.0
    killing_due: float | None = None
    images: dict[str, str] = field(default_factory=dict)
    mounted: bool = False  # its volumes are attached to ``node`` (it passed volume setup)
    warned: tuple[str, float] | None = None  # last volume warning message and when
    # image -> its pull, or None when the node already held it (set when the image stage began)
    pulls: dict[str, Pull | None] = field(default_factory=dict)
    pulling_since: float = 0.0
    # container -> its trainer run (or its emulated push: .saving)
    runs: dict[str, TrainerRun | PushRun] = field(default_factory=dict)
    # containers whose init waits for its gate file (STARVERSE_GATE) before starting the program
    gated: set[str] = field(default_factory=set)


def _containers(pod: Obj) -> list[Obj]:
    return [c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]


def _holding(image: str, size_bytes: int, node: Obj) -> None:
    add_image(node, image, size_bytes)


def _init_containers(pod: Obj) -> list[Obj]:
    return [c for c in (pod.get("spec") or {}).get("initContainers") or [] if isinstance(c, dict)]


def _field_path(container: Obj, init: bool = False) -> str:
    return f"spec.{'initContainers' if init else 'containers'}{{{container.get('name', '')}}}"


def _terminated(status: Obj, code: int, message: str, stamp: str, reason: str = "") -> Obj:
    """``state.terminated`` of a container (its ``status``) that exited with ``code``."""
    started = ((status.get("state") or {}).get("running") or {}).get("startedAt", stamp)
    terminated: Obj = {
        "exitCode": code,
        "reason": reason or ("Completed" if code == 0 else "Error"),
        "startedAt": started,
        "finishedAt": stamp,
        "containerID": status.get("containerID", ""),
    }
    if message:
        terminated["message"] = message
    return terminated


def _renewed(lease: Obj) -> None:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease.setdefault("spec", {})["renewTime"] = stamp


def _ready_message(pod: Obj) -> str:
    names = " ".join(c.get("name", "") for c in _containers(pod))
    return f"containers with unready status: [{names}]"


class Kubelet:
    def __init__(
        self,
        api: Api,
        pull_delay_s: float,
        start_delay_s: float,
        termination_s: float,
        volume_data: VolumeData,
        images: ImageCatalog | None = None,
        load_s: float = 0.0,
        lease_renew_s: float = 10.0,
    ) -> None:
        self.api = api
        # as the kubelet's node lease controller: renew the node's Lease in kube-node-lease
        # every leaseDurationSeconds / 4 (10 s); a stopped kubelet (a frozen node) renews none
        self.lease_renew_s = lease_renew_s
        self._lease_renewed: dict[str, float] = {}
        self.volume_data = volume_data
        self.logs = LogBook()
        self.images = images or ImageCatalog()
        self.pulls = Pulls()
        self.configured_pull_delay_s = pull_delay_s
        self.pull_delay_s = pull_delay_s
        self.start_delay_s = start_delay_s
        self.termination_s = termination_s
        self.load_s = load_s  # an endpoint pod's model-load time unless its env says
        self.failing_images: list[str] = []
        # image fragment → the runtime's message when it cannot run a container of it
        self.failing_starts: dict[str, str] = {}
        self.exiting_images: dict[str, tuple[int, str]] = {}
        self.frozen_nodes: set[str] = set()
        self.sims: dict[str, PodSim] = {}
        self._ip_serial: dict[str, int] = {}

    def reset(self) -> None:
        """Forget every pod and fault: kubelets as they were when the emulator started."""
        self.pull_delay_s = self.configured_pull_delay_s
        self.failing_images.clear()
        self.failing_starts.clear()
        self.exiting_images.clear()
        self.frozen_nodes.clear()
        self._lease_renewed.clear()
        self.sims.clear()
        self._ip_serial.clear()
        self.pulls.reset()
        self.logs.reset()

    # --- loop --------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        store = self.api.store
        for held_by, image, size in self.pulls.finished(now):
            self._write(NODES, "", held_by, functools.partial(_holding, image, size))
        pods = store.items(PODS)
        nodes = {n["metadata"]["name"]: n for n in store.items(NODES)}
        self._leases_renew(nodes, now)
        live: set[str] = set()
        # admit in arrival order, as a kubelet sees pods
        ordered = sorted(
            pods, key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"])
        )
        for pod in ordered:
            uid = pod["metadata"].get("uid", "")
            live.add(uid)
            node_name = (pod.get("spec") or {}).get("nodeName")
            node = nodes.get(node_name or "")
            if node is None or node_name in self.frozen_nodes or not self._node_ready(node):
                continue
            sim = self.sims.get(uid)
            if pod["metadata"].get("deletionTimestamp"):
                if sim is not None and sim.stage == "done":
                    continue  # a terminal pod: the API removes it at once
                if sim is None:
                    sim = self.sims[uid] = PodSim("killing", now, node.get("metadata", {})["name"])
                self._terminate(pod, sim, now)
                continue
            if (pod.get("status") or {}).get("phase") in TERMINAL:
                continue
            if sim is None:
                self._admit(pod, node, pods, now)
            elif now >= sim.due:
                self._advance(pod, sim, now)
        for uid in [u for u in self.sims if u not in live]:
            del self.sims[uid]
        for uid in self.logs.pods() - live:
            self.logs.forget(uid)

    def _leases_renew(self, nodes: dict[str, Obj], now: float) -> None:
        """Each running kubelet renews its node's Lease (spec.renewTime, microseconds as the
        kubelet writes it) once lease_renew_s has passed on the emulated clock."""
        for name in nodes:
            if name in self.frozen_nodes:
                continue
            if now - self._lease_renewed.get(name, float("-inf")) < self.lease_renew_s:
                continue
            self._lease_renewed[name] = now
            self.api.mutate(LEASES, "kube-node-lease", name, _renewed)

    @staticmethod
    def _node_ready(node: Obj) -> bool:
        for condition in (node.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Ready":
                return condition.get("status") == "True"
        return False

    # --- admission ---------------------------------------------------------------------------

    def _admit(self, pod: Obj, node: Obj, pods: list[Obj], now: float) -> None:
        meta = pod["metadata"]
        node_name = node["metadata"]["name"]
        admitted = {uid for uid, sim in self.sims.items() if sim.node == node_name}
        used = node_usage(
            [p for p in pods if p["metadata"].get("uid") != meta.get("uid")], admitted
        ).get(node_name, Counter())
        have = allocatable(node)
        wanted = dict(pod_requests(pod))
        wanted["pods"] = Fraction(1)
        for resource in sorted(wanted, key=lambda r: (r != "nvidia.com/gpu", r)):
            amount = wanted[resource]
            capacity = have.get(resource, Fraction(0))
            in_use = Fraction(used.get(resource, 0))  # the usage Counter holds Fractions and ints
            if amount > 0 and amount > capacity - in_use:
                self._reject(
                    pod, node_name, resource, describe_shortage(resource, amount, in_use, capacity)
                )
                return
        block = self._volume_block(pod, node_name)
        sim = self.sims[meta["uid"]] = PodSim("mounting", now, node_name)
        address = next(
            (
                a["address"]
                for a in (node.get("status") or {}).get("addresses") or []
                if a.get("type") == "InternalIP"
            ),
            "",
        )

        def start(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            status["hostIP"] = address
            status["hostIPs"] = [{"ip": address}]
            status["startTime"] = now_iso()
            set_condition(obj, "PodReadyToStartContainers", "False" if block else "True")
            set_condition(obj, "Initialized", "True")
            set_condition(obj, "Ready", "False", "ContainersNotReady", _ready_message(obj))
            set_condition(
                obj, "ContainersReady", "False", "ContainersNotReady", _ready_message(obj)
            )
            set_condition(obj, "PodScheduled", "True")
            status["containerStatuses"] = [
                self._waiting(c, "ContainerCreating", "") for c in _containers(obj)
            ]

        updated = self._write(PODS, meta["namespace"], meta["name"], start)
        if updated is None:
            return
        if block is None:
            self._start_pulling(updated, sim, now)
        else:
            self._volume_warning(updated, sim, now, block)

    # --- volumes -----------------------------------------------------------------------------

    def _attached(self, pod: Obj) -> bool:
        """Whether a pod's volumes are attached to its node: it passed volume setup here."""
        sim = self.sims.get(pod["metadata"].get("uid", ""))
        if sim is not None and sim.mounted:
            return True
        return (pod.get("status") or {}).get("phase") == "Running"

    def _volume_block(self, pod: Obj, node_name: str) -> VolumeBlock | None:
        store = self.api.store
        return mount_block(store, pod) or attach_block(store, pod, node_name, self._attached)

    def _volume_warning(self, pod: Obj, sim: PodSim, now: float, block: VolumeBlock) -> None:
        """Record the warning when it is new or ``MOUNT_WARNING_S`` old (it aggregates)."""
        if sim.warned and sim.warned[0] == block.message and now - sim.warned[1] < MOUNT_WARNING_S:
            return
        sim.warned = (block.message, now)
        self.api.events.record(
            PODS,
            pod,
            block.reason,
            block.message,
            type_="Warning",
            component=block.component,
            host=sim.node if block.component == "kubelet" else "",
        )

    def _mount(self, pod: Obj, sim: PodSim, now: float) -> None:
        """A pod waiting for its volumes: retry; once they mount, go on to pull images."""
        block = self._volume_block(pod, sim.node)
        if block is not None:
            self._volume_warning(pod, sim, now, block)
            return
        meta = pod["metadata"]

        def ready_to_start(obj: Obj) -> None:
            set_condition(obj, "PodReadyToStartContainers", "True")

        updated = self._write(PODS, meta["namespace"], meta["name"], ready_to_start)
        self._start_pulling(updated or pod, sim, now)

    def _start_pulling(self, pod: Obj, sim: PodSim, now: float) -> None:
        """Pull what the node lacks (sharing a pull already under way there); the stage ends
        when the last of them is in, plus the fixed delay."""
        sim.mounted = True
        node = self.api.store.get(NODES, "", sim.node) or {}
        mbps = node_bandwidth_mbps(node, self.images.bandwidth_mbps)
        ready_at = now
        sim.pulls, sim.pulling_since = {}, now
        for container, init in self._image_containers(pod):
            image = str(container.get("image"))
            if image not in sim.pulls:
                always = container.get("imagePullPolicy") == "Always"
                if holds(node, image) and not always:
                    sim.pulls[image] = None
                elif self._failing(image):  # fails at once, lands nothing on the node
                    sim.pulls[image] = Pull(now, now, 0)
                else:
                    size = self.images.size(image)
                    sim.pulls[image] = self.pulls.pull(sim.node, image, size, mbps, now)
            pull = sim.pulls[image]
            if pull is not None:
                ready_at = max(ready_at, pull.ends)
                self._event(
                    pod, sim.node, "Pulling", f'Pulling image "{image}"', container, init=init
                )
        sim.stage, sim.due = "pulling", ready_at + self.pull_delay_s

    @staticmethod
    def _image_containers(pod: Obj) -> list[tuple[Obj, bool]]:
        return [(c, True) for c in _init_containers(pod)] + [(c, False) for c in _containers(pod)]

    def _pulled_message(self, sim: PodSim, image: str, now: float) -> str:
        pull = sim.pulls.get(image)
        if pull is None:
            return f'Container image "{image}" already present on machine'
        took = round((pull.ends - pull.began + self.pull_delay_s) * 1000)
        waited = round((now - sim.pulling_since) * 1000)
        return (
            f'Successfully pulled image "{image}" in {took}ms ({max(waited, took)}ms including '
            f"waiting). Image size: {pull.size_bytes} bytes."
        )

    def _reject(self, pod: Obj, node_name: str, resource: str, message: str) -> None:
        meta = pod["metadata"]
        reason = f"OutOf{resource}"

        def fail(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            status["phase"] = "Failed"
            status["reason"] = reason
            status["message"] = message
            status["startTime"] = now_iso()

        updated = self._write(PODS, meta["namespace"], meta["name"], fail)
        if updated is not None:
            self._event(updated, node_name, reason, message, None, "Warning")

    # --- lifecycle ---------------------------------------------------------------------------

    def _failing(self, image: str) -> bool:
        return any(fragment in image for fragment in self.failing_images)

    def _advance(self, pod: Obj, sim: PodSim, now: float) -> None:
        meta = pod["metadata"]
        if sim.stage == "mounting":
            self._mount(pod, sim, now)
        elif sim.stage == "pulling":
            failing = [c for c in _containers(pod) if self._failing(str(c.get("image")))]
            if failing:
                self._pull_failed(pod, sim, failing, now)
                return
            for container, init in self._image_containers(pod):
                image = str(container.get("image"))
                message = self._pulled_message(sim, image, now)
                self._event(pod, sim.node, "Pulled", message, container, init=init)
                if init:
                    if not self._run_init(pod, sim, container):
                        return
                    continue
                self._event(
                    pod,
                    sim.node,
                    "Created",
                    f"Created container: {container.get('name')}",
                    container,
                )
                self._event(
                    pod,
                    sim.node,
                    "Started",
                    f"Started container {container.get('name')}",
                    container,
                )
            sim.stage, sim.due = "starting", now + self.start_delay_s
        elif sim.stage == "pull_error":
            self._backoff(pod, sim, now)
        elif sim.stage == "backoff":
            sim.stage, sim.due = "pulling", now + self.pull_delay_s
            for container in _containers(pod):
                if self._failing(str(container.get("image"))) or not sim.images:
                    self._event(
                        pod,
                        sim.node,
                        "Pulling",
                        f'Pulling image "{container.get("image")}"',
                        container,
                    )
        elif sim.stage in ("starting", "crashed"):
            if sim.stage == "crashed":
                for container in _containers(pod):
                    self._event(
                        pod,
                        sim.node,
                        "Started",
                        f"Started container {container.get('name')}",
                        container,
                    )
            missing = [
                (c.get("name", ""), m)
                for c in _containers(pod)
                if (m := missing_command(self.volume_data, pod, c)) is not None
            ]
            if missing:  # the runtime finds no command to exec: StartError, then a crash loop
                running = self._run(meta["namespace"], meta["name"], sim.node, ready=False)
                names = [name for name, _message in missing]
                self._exit(running or pod, sim, now, names, 128, missing[0][1], "StartError")
                return
            exit_with = standin_exit(pod) or next(
                (
                    told
                    for part, told in self.exiting_images.items()
                    for c in _containers(pod)
                    if part in str(c.get("image"))
                ),
                None,
            )
            if exit_with is not None:
                running = self._run(meta["namespace"], meta["name"], sim.node, ready=False)
                code, message = exit_with
                for item in (running or {}).get("status", {}).get("containerStatuses") or []:
                    self.logs.start(meta.get("uid", ""), item["name"], item["containerID"])
                    if message:
                        self.logs.write(item["containerID"], message)
                self._exit(
                    running or pod,
                    sim,
                    now,
                    [c.get("name", "") for c in _containers(pod)],
                    code,
                    message,
                )
                return
            loading = load_seconds(pod, self.load_s)
            if loading > 0:
                sim.stage, sim.due = "loading", now + loading
            else:
                sim.stage, sim.due = "running", float("inf")
            running = self._run(meta["namespace"], meta["name"], sim.node, ready=loading <= 0)
            if running is not None:
                self._start_programs(running, sim, now)
        elif sim.stage == "loading":
            sim.stage, sim.due = "running", float("inf")
            self._mark_ready(meta["namespace"], meta["name"])
        elif sim.stage == "running":
            if sim.gated:
                self._start_programs(pod, sim, now)
            self._train(pod, sim, now)

    # --- programs ----------------------------------------------------------------------------

    def _run_init(self, pod: Obj, sim: PodSim, container: Obj) -> bool:
        """Run an init container to its end (the seeding program copies, anything else runs
        nothing and succeeds); its status is recorded. A failed one leaves the pod Pending in
        ``Init:Error`` (its message and a ``BackOff`` warning say why): False."""
        name = container.get("name", "")
        self._event(pod, sim.node, "Created", f"Created container: {name}", container, init=True)
        image = str(container.get("image"))
        cannot = next((m for part, m in self.failing_starts.items() if part in image), None)
        cannot = cannot or missing_command(self.volume_data, pod, container)
        if cannot is not None:  # the runtime cannot exec its command (fail_container_start)
            code, message, reason = 128, cannot, "StartError"
            self._event(
                pod, sim.node, "Failed", f"Error: {cannot}", container, "Warning", init=True
            )
        else:
            self._event(pod, sim.node, "Started", f"Started container {name}", container, init=True)
            if layer_args(container) is not None:
                code, message = save_layer(self.volume_data, pod, container)
            elif tools_target(container) is not None:
                code, message = tools_install(self.volume_data, pod, container)
            else:
                code, message = seed(self.volume_data, pod, container)
            reason = ""
        stamp = now_iso()

        def record(obj: Obj) -> None:
            statuses = [
                s for s in obj["status"].get("initContainerStatuses") or [] if s["name"] != name
            ]
            statuses.append(
                {
                    "name": name,
                    "image": str(container.get("image")),
                    "imageID": "",
                    "ready": code == 0,
                    "restartCount": 0,
                    "state": {"terminated": _terminated({}, code, message, stamp, reason)},
                }
            )
            obj["status"]["initContainerStatuses"] = statuses

        meta = pod["metadata"]
        self._write(PODS, meta["namespace"], meta["name"], record)
        if code != 0:
            self._event(
                pod,
                sim.node,
                "BackOff",
                f"Back-off restarting failed container {name}: {message}",
                container,
                "Warning",
                init=True,
            )
            sim.stage, sim.due = "init_failed", float("inf")
        return code == 0

    def _start_programs(self, pod: Obj, sim: PodSim, now: float) -> None:
        """Each container instance that has just started gets its log and, when its command
        is the simulated trainer, its run; a container that runs nothing logs the banner. A
        container whose env names a gate file (STARVERSE_GATE, as the image's init reads it)
        starts its program only once that file exists on one of the pod's volumes (written
        through pods/exec): until then it waits, polled every GATE_POLL_S."""
        meta = pod["metadata"]
        specs = {c.get("name", ""): c for c in _containers(pod)}
        for item in pod["status"].get("containerStatuses") or []:
            name, container_id = item["name"], item.get("containerID", "")
            if "running" not in (item.get("state") or {}):
                continue
            if self.logs.get(container_id) and name not in sim.gated:
                continue
            container = specs.get(name) or {}
            if not self.logs.get(container_id):
                self.logs.start(meta.get("uid", ""), name, container_id)
            if self._gate_closed(pod, container, sim, name, container_id):
                continue
            self._program_start(pod, container, sim, name, container_id, now)
        self._schedule(sim, now)

    def _gate_closed(
        self, pod: Obj, container: Obj, sim: PodSim, name: str, container_id: str
    ) -> bool:
        gate = container_env(container).get(GATE_ENV)
        if not gate:
            return False
        place = self.volume_data.resolve(pod, container, gate)
        if place is not None and place.path.exists():
            sim.gated.discard(name)
            return False
        if name not in sim.gated:
            sim.gated.add(name)
            self.logs.write(
                container_id, f"starverse-init: waiting for {gate} before starting the program"
            )
        return True

    def _program_start(
        self, pod: Obj, container: Obj, sim: PodSim, name: str, container_id: str, now: float
    ) -> None:
        meta = pod["metadata"]
        pushing = push(self.volume_data, self.images, pod, container, now)
        if pushing is not None:
            sim.runs[name] = pushing
            return
        args = trainer_args(container)
        if args is None:
            self.logs.write(
                container_id,
                f"[kube emulator] container {name} of pod {meta.get('namespace')}/"
                f"{meta['name']} is emulated (development stand-in): no process runs, so "
                "there is no output.",
            )
            return
        if isinstance(args, BadArgs):
            self.logs.write(container_id, args.message)
            sim.runs[name] = TrainerRun.exited(USAGE_EXIT, now)  # it exits on the next pass
            return
        checkpoint, read_only = None, False
        if args.checkpoint_dir:
            place = self.volume_data.resolve(pod, container, args.checkpoint_dir)
            if place is not None:
                checkpoint, read_only = place.path / "step", place.read_only
        run, lines = start_run(args, container_env(container), checkpoint, read_only, now)
        for line in lines:
            self.logs.write(container_id, line)
        sim.runs[name] = run

    @staticmethod
    def _schedule(sim: PodSim, now: float) -> None:
        """A running pod is next due when its earliest trainer has a step to take, or its
        gate is next looked at."""
        if sim.stage == "running":
            sim.due = min((run.next_due for run in sim.runs.values()), default=float("inf"))
            if sim.gated:
                sim.due = min(sim.due, now + GATE_POLL_S)

    def _train(self, pod: Obj, sim: PodSim, now: float) -> None:
        """Play the pod's trainers up to ``now``; a trainer that exits ends its container."""
        statuses = {s.get("name"): s for s in pod["status"].get("containerStatuses") or []}
        exited: list[tuple[str, int]] = []
        for name, run in list(sim.runs.items()):
            container_id = (statuses.get(name) or {}).get("containerID", "")
            for line in run.advance(now):
                self.logs.write(container_id, line)
            if run.exit_code is not None:
                exited.append((name, run.exit_code))
        for name, code in exited:
            current = self.api.store.get(
                PODS, pod["metadata"]["namespace"], pod["metadata"]["name"]
            )
            if current is None or sim.stage != "running":
                break
            self._container_exited(current, sim, name, code, now)
        self._schedule(sim, now)

    def _pull_failed(self, pod: Obj, sim: PodSim, failing: list[Obj], now: float) -> None:
        meta = pod["metadata"]
        messages = {
            c.get("name", ""): (
                f'failed to pull and unpack image "{c.get("image")}": emulated pull failure '
                "(fail_image_pull in the kube emulator)"
            )
            for c in failing
        }

        def mark(obj: Obj) -> None:
            obj["status"]["containerStatuses"] = [
                self._waiting(c, "ErrImagePull", messages[c.get("name", "")])
                if c.get("name") in messages
                else self._waiting(c, "ContainerCreating", "")
                for c in _containers(obj)
            ]

        self._write(PODS, meta["namespace"], meta["name"], mark)
        for container in failing:
            self._event(
                pod,
                sim.node,
                "Failed",
                f'Failed to pull image "{container.get("image")}": '
                f"{messages[container.get('name', '')]}",
                container,
                "Warning",
            )
            self._event(pod, sim.node, "Failed", "Error: ErrImagePull", container, "Warning")
        sim.images = {c.get("name", ""): str(c.get("image")) for c in failing}
        sim.stage, sim.due = "pull_error", now + max(self.pull_delay_s, 0.05)

    def _backoff(self, pod: Obj, sim: PodSim, now: float) -> None:
        meta = pod["metadata"]
        sim.backoff_s = min(max(sim.backoff_s * 2, 0.5, self.pull_delay_s * 4), 10.0)

        def mark(obj: Obj) -> None:
            obj["status"]["containerStatuses"] = [
                self._waiting(c, "ImagePullBackOff", f'Back-off pulling image "{c.get("image")}"')
                if c.get("name") in sim.images
                else self._waiting(c, "ContainerCreating", "")
                for c in _containers(obj)
            ]

        self._write(PODS, meta["namespace"], meta["name"], mark)
        for container in _containers(pod):
            if container.get("name") in sim.images:
                self._event(
                    pod,
                    sim.node,
                    "BackOff",
                    f'Back-off pulling image "{container.get("image")}"',
                    container,
                )
                self._event(
                    pod, sim.node, "Failed", "Error: ImagePullBackOff", container, "Warning"
                )
        sim.stage, sim.due = "backoff", now + sim.backoff_s

    def _pod_ip(self, node_name: str) -> str:
        node = self.api.store.get(NODES, "", node_name) or {}
        cidr = (node.get("spec") or {}).get("podCIDR") or "10.244.0.0/24"
        prefix = cidr.rsplit(".", 1)[0]
        serial = self._ip_serial.get(node_name, 1) % 253 + 1
        self._ip_serial[node_name] = serial
        return f"{prefix}.{serial + 1}"

    def _run(self, namespace: str, name: str, node_name: str, ready: bool = True) -> Obj | None:
        """Containers running (again, after a crash: restart counts and the last state kept;
        one still running or terminated for good stays as it is); Ready unless the model is
        still loading. Each instance has its own ``containerID`` (a restart gets a new one)."""
        current = self.api.store.get(PODS, namespace, name) or {}
        address = (current.get("status") or {}).get("podIP") or self._pod_ip(node_name)

        def run(obj: Obj) -> None:
            status = obj["status"]
            status["phase"] = "Running"
            status["podIP"] = address
            status["podIPs"] = [{"ip": address}]
            stamp = now_iso()
            before = {c.get("name"): c for c in status.get("containerStatuses") or []}
            statuses = []
            for container in _containers(obj):
                previous = before.get(container.get("name", "")) or {}
                state = previous.get("state") or {}
                if "terminated" in state or ("running" in state and previous.get("containerID")):
                    statuses.append(previous)
                    continue
                image = str(container.get("image"))
                digest = hashlib.sha256(image.encode()).hexdigest()
                restarts = int(previous.get("restartCount") or 0)
                container_id = hashlib.sha256(
                    f"{obj['metadata']['uid']}/{container.get('name')}/{restarts}".encode()
                ).hexdigest()
                statuses.append(
                    {
                        "name": container.get("name", ""),
                        "state": {"running": {"startedAt": stamp}},
                        "lastState": previous.get("lastState") or {},
                        "ready": ready,
                        "restartCount": int(previous.get("restartCount") or 0),
                        "image": image,
                        "imageID": f"{image.split('@')[0]}@sha256:{digest}",
                        "containerID": f"containerd://{container_id}",
                        "started": True,
                    }
                )
            status["containerStatuses"] = statuses
            for kind in ("PodReadyToStartContainers", "Initialized", "PodScheduled"):
                set_condition(obj, kind, "True")
            for kind in ("Ready", "ContainersReady"):
                if ready:
                    set_condition(obj, kind, "True")
                else:
                    set_condition(obj, kind, "False", "ContainersNotReady", _ready_message(obj))

        return self._write(PODS, namespace, name, run)

    def _mark_ready(self, namespace: str, name: str) -> None:
        """The model has loaded: the containers and the pod become Ready."""

        def ready(obj: Obj) -> None:
            for item in obj["status"].get("containerStatuses") or []:
                item["ready"] = True
            for kind in ("Ready", "ContainersReady"):
                set_condition(obj, kind, "True")

        self._write(PODS, namespace, name, ready)

    def crash(self, namespace: str, name: str, now: float, container: str | None = None) -> None:
        """The pod's container (or every container) exits with an error once: restartCount
        goes up, the pod is not Ready in ``CrashLoopBackOff`` for ``start_delay_s``, then the
        container runs again (an endpoint loads its model again first)."""
        pod = self.api.get_raw(PODS, namespace, name)
        sim = self.sims.get(pod["metadata"].get("uid", ""))
        if sim is None or sim.stage not in ("running", "loading"):
            raise ValueError(f"pod {namespace}/{name} has no running container to crash")
        names = [c.get("name", "") for c in _containers(pod)]
        if container is not None and container not in names:
            raise ValueError(f"pod {namespace}/{name} has no container {container!r}")
        self._exit(pod, sim, now, [container] if container is not None else names, 1, "")

    def _container_exited(self, pod: Obj, sim: PodSim, name: str, code: int, now: float) -> None:
        """A container's program ended with ``code``: restarted as ``restartPolicy`` says, or
        terminated for good (and the pod terminal once all its containers are)."""
        policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
        message = self._termination_message(pod, name, code)
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            self._exit(pod, sim, now, [name], code, message)
            return
        self._end_instances(pod, sim, [name])
        stamp = now_iso()

        def terminate(obj: Obj) -> None:
            status = obj["status"]
            for item in status.get("containerStatuses") or []:
                if item.get("name") == name:
                    item["state"] = {"terminated": _terminated(item, code, message, stamp)}
                    item["ready"] = False
                    item["started"] = False
            states = [s.get("state") or {} for s in status.get("containerStatuses") or []]
            if states and all("terminated" in s for s in states):
                succeeded = all(s["terminated"].get("exitCode") == 0 for s in states)
                status["phase"] = "Succeeded" if succeeded else "Failed"
                reason = "PodCompleted" if succeeded else "PodFailed"
                for kind in ("Ready", "ContainersReady"):
                    set_condition(obj, kind, "False", reason)
            else:
                for kind in ("Ready", "ContainersReady"):
                    set_condition(obj, kind, "False", "ContainersNotReady", _ready_message(obj))

        updated = self._write(
            PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], terminate
        )
        if updated is not None and updated["status"].get("phase") in TERMINAL:
            sim.stage, sim.due = "done", float("inf")

    def _termination_message(self, pod: Obj, name: str, code: int) -> str:
        """What the kubelet reports as the termination message: under
        ``FallbackToLogsOnError``, the last lines of a failed container's log (no file is ever
        written at ``terminationMessagePath``, so there is nothing else to report)."""
        container = next((c for c in _containers(pod) if c.get("name") == name), {})
        if code == 0 or container.get("terminationMessagePolicy") != "FallbackToLogsOnError":
            return ""
        container_id = next(
            (
                str(s.get("containerID", ""))
                for s in pod["status"].get("containerStatuses") or []
                if s.get("name") == name
            ),
            "",
        )
        text = "\n".join(self.logs.tail(container_id, MESSAGE_LINES))
        return text.encode()[-MESSAGE_BYTES:].decode(errors="ignore")

    def _end_instances(self, pod: Obj, sim: PodSim, names: list[str]) -> None:
        """The named containers' current instances end: no more output, no more steps."""
        for item in pod["status"].get("containerStatuses") or []:
            if item.get("name") in names:
                self.logs.finish(item.get("containerID", ""))
                sim.runs.pop(item.get("name", ""), None)

    def _exit(
        self,
        pod: Obj,
        sim: PodSim,
        now: float,
        crashing: list[str],
        code: int,
        message: str,
        reason: str = "",
    ) -> None:
        """The named containers exit with ``code`` (and the termination ``message``, as a
        kubelet copies it from the container's termination log): CrashLoopBackOff until
        ``start_delay_s`` has passed, then started again."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self._end_instances(pod, sim, crashing)
        stamp = now_iso()

        def crash(obj: Obj) -> None:
            for item in obj["status"].get("containerStatuses") or []:
                if item.get("name") not in crashing:
                    continue
                item["lastState"] = {"terminated": _terminated(item, code, message, stamp, reason)}
                item["state"] = {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off 10s restarting failed container={item.get('name')} "
                        f"pod={name}_{namespace}({obj['metadata'].get('uid', '')})",
                    }
                }
                item["restartCount"] = int(item.get("restartCount") or 0) + 1
                item["ready"] = False
                item["started"] = False
            for kind in ("Ready", "ContainersReady"):
                set_condition(obj, kind, "False", "ContainersNotReady", _ready_message(obj))

        updated = self._write(PODS, namespace, name, crash)
        for item in _containers(updated or pod):
            if item.get("name") in crashing:
                self._event(
                    updated or pod,
                    sim.node,
                    "BackOff",
                    "Back-off restarting failed container "
                    f"{item.get('name')} in pod {name}_{namespace}",
                    item,
                    "Warning",
                )
        sim.stage, sim.due = "crashed", now + max(self.start_delay_s, 0.05)

    def _terminate(self, pod: Obj, sim: PodSim, now: float) -> None:
        meta = pod["metadata"]
        if sim.killing_due is None:
            grace = float(meta.get("deletionGracePeriodSeconds") or 0)
            sim.stage = "killing"
            sim.killing_due = now + min(grace, self.termination_s)
            for container in _containers(pod):
                self._event(
                    pod,
                    sim.node,
                    "Killing",
                    f"Stopping container {container.get('name')}",
                    container,
                )
        if now < sim.killing_due or not meta.get("deletionGracePeriodSeconds"):
            return
        self._end_instances(pod, sim, [c.get("name", "") for c in _containers(pod)])

        def finish(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            stamp = now_iso()
            status["phase"] = "Succeeded"
            for item in status.get("containerStatuses") or []:
                started = ((item.get("state") or {}).get("running") or {}).get("startedAt", stamp)
                item["state"] = {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": started,
                        "finishedAt": stamp,
                    }
                }
                item["ready"] = False
                item["started"] = False
            for kind in ("Ready", "ContainersReady"):
                set_condition(obj, kind, "False", "PodCompleted")
            obj["metadata"]["deletionGracePeriodSeconds"] = 0

        self._write(PODS, meta["namespace"], meta["name"], finish)

    # --- helpers -----------------------------------------------------------------------------

    def _write(
        self, rt: ResourceType, namespace: str, name: str, change: Callable[[Obj], Any]
    ) -> Obj | None:
        """A kubelet's write: ``change`` alters the object's status (and metadata) only, so
        only those are copied (Api.mutate's ``touches``)."""
        return self.api.mutate(rt, namespace, name, change, touches=_STATUS)

    @staticmethod
    def _waiting(container: Obj, reason: str, message: str) -> Obj:
        waiting = {"reason": reason}
        if message:
            waiting["message"] = message
        return {
            "name": container.get("name", ""),
            "state": {"waiting": waiting},
            "lastState": {},
            "ready": False,
            "restartCount": 0,
            "image": str(container.get("image", "")),
            "imageID": "",
            "started": False,
        }

    def _event(
        self,
        pod: Obj,
        node_name: str,
        reason: str,
        message: str,
        container: Obj | None,
        type_: str = "Normal",
        *,
        init: bool = False,
    ) -> None:
        self.api.events.record(
            PODS,
            pod,
            reason,
            message,
            type_=type_,
            component="kubelet",
            host=node_name,
            field_path=_field_path(container, init) if container else "",
        )
